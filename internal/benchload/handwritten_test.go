package benchload

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHandWrittenHTTPMulti: the folded SQL a floor is measured with commits what
// inboxhttp's SQL commits, the key's row with its stored response and the handler's
// update, so that its ratio is not flattered by work it skipped.
func TestHandWrittenHTTPMulti(t *testing.T) {
	ctx := context.Background()
	_, db, closeFn, err := Open(ctx, "mariadb", false)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("MariaDB: %v", err)
		}
		t.Skipf("MariaDB not reachable (set INBOX_MARIADB_DSN): %v", err)
	}
	t.Cleanup(closeFn)
	tgt, err := NewTarget(ctx, "mariadb", nil, db, 1, fmt.Sprintf("multi_%d", time.Now().UnixNano()%1e9), "")
	if tgt != nil {
		t.Cleanup(func() { _ = tgt.Drop(context.Background(), true) })
	}
	require.NoError(t, err)
	for i := range 3 {
		require.NoError(t, tgt.HandWrittenHTTPMulti(ctx, fmt.Sprint("multi-", i), []byte(fmt.Sprint("response-", i))))
	}
	var keys, withOutput int64
	require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*), count(`output`) FROM `"+tgt.InboxTable+"` WHERE `consumer` = 'handwritten'").Scan(&keys, &withOutput))
	require.Equal(t, [2]int64{3, 3}, [2]int64{keys, withOutput}, "every key committed with its response")
	var stored string
	require.NoError(t, db.QueryRowContext(ctx, "SELECT `output` FROM `"+tgt.InboxTable+"` WHERE `consumer` = 'handwritten' AND `key` = 'multi-1'").Scan(&stored))
	require.Equal(t, "response-1", stored)
	applied, err := tgt.Applied(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), applied, "the handler's update committed with each key")
	require.Error(t, tgt.HandWrittenHTTPMulti(ctx, "multi-1", []byte("again")), "a key already there is refused")
	applied, err = tgt.Applied(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), applied, "nothing applied for the refused key")
}
