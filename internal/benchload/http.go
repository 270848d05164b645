package benchload

import "context"

// InTx runs the handler's statements in the inbox transaction ctx carries: the work of a
// handler behind inboxhttp, which gets its transaction from the request context.
func (t *Target) InTx(ctx context.Context, key string) error {
	return t.work(ctx, txOf(ctx), key)
}
