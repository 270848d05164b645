package browsertest

import (
	"net/url"
	"strings"
	"sync"
)

// lockedLog is the handler's log, safe for its writes and the test's reads.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func queryEscape(s string) string { return url.QueryEscape(s) }
