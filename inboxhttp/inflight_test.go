package inboxhttp_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox/inboxhttp"
)

// Requests whose key is still in flight: waits, 409s, and a client that gave up.

// TestClientTimedOutWhileServerCommitted: the client gives up while the handler is still
// running; the server finishes and commits anyway (the handler's context is detached from
// the client), and the client's retry gets the stored response, waiting for the first
// request's transaction if it is still open.
func TestClientTimedOutWhileServerCommitted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		p := &payments{b: b, hold: make(chan struct{}), entered: make(chan struct{}, 1)}
		url := serve(t, newMiddleware(t, b, inboxhttp.Config{}), p)

		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"amount":9}`))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", `"retry-me"`)
		gaveUp := make(chan error, 1)
		go func() { _, err := do(http.DefaultClient, req); gaveUp <- err }()
		<-p.entered // the handler wrote through the transaction
		cancel()    // the client times out
		require.ErrorIs(t, <-gaveUp, context.Canceled)

		retried := make(chan reply, 1)
		go func() {
			got, err := post(t, &http.Client{}, url, "retry-me", `{"amount":9}`)
			if err != nil {
				got = reply{body: err.Error()}
			}
			retried <- got
		}()
		close(p.hold) // the first request goes on and commits
		got := <-retried
		require.Equal(t, http.StatusCreated, got.status, got.body)
		require.True(t, got.replayed())
		require.Equal(t, `{"id":"pay-1","amount":9}`, got.body)
		require.Equal(t, int32(1), p.calls.Load())
		total, credits := b.balance(t)
		require.Equal(t, 9, total)
		require.Equal(t, 1, credits)
	})
}

// TestConcurrentRequestsOneKey: 16 concurrent requests with one key; the effect happens
// once, and every response is the stored one or a 409. The 15 others are sent while the
// first is in its handler: with Wait they wait and get the stored response; with
// Conflict they get 409 at once.
func TestConcurrentRequestsOneKey(t *testing.T) {
	t.Parallel()
	for _, mode := range []inboxhttp.InFlightMode{inboxhttp.Wait, inboxhttp.Conflict} {
		t.Run(mode.String(), func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b backend) {
				p := &payments{b: b, hold: make(chan struct{}), entered: make(chan struct{}, 1)}
				url := serve(t, newMiddleware(t, b, inboxhttp.Config{InFlight: mode}), p)
				client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 32, MaxIdleConnsPerHost: 32}}

				const n = 16
				replies := make([]reply, n)
				errs := make([]error, n)
				var first, others sync.WaitGroup
				first.Go(func() { replies[0], errs[0] = post(t, client, url, "one-key", `{"amount":3}`) })
				<-p.entered
				for i := 1; i < n; i++ {
					others.Go(func() { replies[i], errs[i] = post(t, client, url, "one-key", `{"amount":3}`) })
				}
				if mode == inboxhttp.Conflict {
					others.Wait() // all answered while the first still holds the key
				} else {
					time.Sleep(100 * time.Millisecond) // let them pile up behind the first
				}
				close(p.hold)
				first.Wait()
				others.Wait()

				require.NoError(t, errs[0])
				require.Equal(t, http.StatusCreated, replies[0].status, replies[0].body)
				require.Equal(t, `{"id":"pay-1","amount":3}`, replies[0].body)
				require.False(t, replies[0].replayed())
				for i, got := range replies[1:] {
					require.NoError(t, errs[i+1])
					if mode == inboxhttp.Conflict {
						requireProblem(t, got, http.StatusConflict)
						require.Equal(t, "1", got.header.Get("Retry-After"))
						continue
					}
					require.True(t, got.replayed(), "every waiting request gets the stored response: %d %s", got.status, got.body)
					require.Equal(t, http.StatusCreated, got.status)
					require.Equal(t, `{"id":"pay-1","amount":3}`, got.body)
				}
				require.Equal(t, int32(1), p.calls.Load())
				total, credits := b.balance(t)
				require.Equal(t, 3, total)
				require.Equal(t, 1, credits)
			})
		})
	}
}

// TestInFlightWaitRunsOut: a request that waits on a held key longer than InFlightWait
// gets 409, and nothing of it is stored; once the first is done, the retry gets its
// response.
func TestInFlightWaitRunsOut(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		p := &payments{b: b, hold: make(chan struct{}), entered: make(chan struct{}, 1)}
		url := serve(t, newMiddleware(t, b, inboxhttp.Config{InFlightWait: 200 * time.Millisecond}), p)
		client := &http.Client{}
		firstDone := make(chan reply, 1)
		go func() {
			got, err := post(t, client, url, "slow", `{"amount":4}`)
			if err != nil {
				got.body = err.Error()
			}
			firstDone <- got
		}()
		select {
		case <-p.entered:
		case got := <-firstDone: // it never reached the handler: say why, rather than wait for good
			require.FailNow(t, "the first request ended before its handler ran", "%d %s", got.status, got.body)
		}
		got, err := post(t, client, url, "slow", `{"amount":4}`)
		require.NoError(t, err)
		requireProblem(t, got, http.StatusConflict)
		close(p.hold)
		require.Equal(t, http.StatusCreated, (<-firstDone).status)

		got, err = post(t, client, url, "slow", `{"amount":4}`)
		require.NoError(t, err)
		require.True(t, got.replayed())
		require.Equal(t, `{"id":"pay-1","amount":4}`, got.body)
		require.Equal(t, int32(1), p.calls.Load())
	})
}
