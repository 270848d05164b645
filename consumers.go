package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// consumerCheckTimeout bounds the consumer name check of a message.
const consumerCheckTimeout = 5 * time.Second

// checkConsumer warns, once per consumer name and Inbox, when the middleware sees a
// consumer with no keys on a table where other consumers have keys (see
// ConsumerNeighbours). It runs before the name's first claim in this process, when the
// store can tell cheaply; a message in a joined transaction leaves the check to a later
// one (the store's handle may be that transaction's very connection). A failed check is
// logged at debug level and changes nothing: the message goes on. msgCtx is the message
// context with its tenant, if any: a TenantStore checks in that tenant's store.
func (ib *Inbox) checkConsumer(msgCtx context.Context, consumer string) {
	neighbours, ok := ib.cfg.Store.(ConsumerNeighbours)
	if !ok || contract.TxFromContext(msgCtx) != nil {
		return
	}
	if _, checked := ib.consumers.LoadOrStore(consumer, struct{}{}); checked {
		return
	}
	ctx, cancel := context.WithTimeout(msgCtx, consumerCheckTimeout)
	defer cancel()
	others, err := neighbours.NeighbourConsumers(ctx, consumer)
	fields := withTenant(msgCtx, watermill.LogFields{"consumer": consumer})
	switch {
	case err != nil:
		ib.cfg.Logger.Debug("inbox: could not check whether the consumer name is new to the table", fields.Add(watermill.LogFields{"error": err}))
	case len(others) > 0:
		ib.cfg.Logger.Info(fmt.Sprintf("inbox: consumer %q has no keys in the inbox table, which holds keys of other consumers (%q among them): "+
			"if this handler was renamed (the consumer defaults to the Watermill handler name), the messages its old name processed will be processed again when they come back; "+
			"set inbox.Config.Consumer to the old name to keep them. A consumer that is new can ignore this", consumer, others),
			fields.Add(watermill.LogFields{"other_consumers": others}))
	}
}
