package inbox

import (
	"github.com/watermill-inbox/inbox/internal/contract"
)

// StorableKey returns key as the stores keep it: unchanged when it is at most MaxKeyLen
// bytes of valid UTF-8 without NUL bytes, otherwise "sha256:" and its hex digest. The
// middleware passes stores keys in this form; a store outside this package applies it to
// the keys its users hand it (Forget), so they find what the middleware stored.
func StorableKey(key string) string { return contract.StorableKey(key) }
