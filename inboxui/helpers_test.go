package inboxui_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxui"
)

const (
	operator = "ops"
	password = "s3cret-pw"
	mount    = "/ops/inbox/"
)

// server is the page of one store, mounted under mount in a server of its own, with
// the log it writes.
type server struct {
	*httptest.Server
	log *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// errBanned is what the test's Authorize returns for the user "banned": a 403.
var errBanned = errors.New("banned")

// serve mounts the page of store behind Basic credentials (operator, password); the
// user "banned" is refused with errBanned.
func serve(t *testing.T, store inbox.Store, cfg inboxui.Config) server {
	t.Helper()
	log := &syncBuffer{}
	basic := inboxui.BasicAuth(operator, password)
	cfg.Store = store
	cfg.Path = mount
	cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	cfg.Authorize = func(r *http.Request) (string, error) {
		if u, _, _ := r.BasicAuth(); u == "banned" {
			return "", errBanned
		}
		return basic(r)
	}
	ui, err := inboxui.New(cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(mount, ui)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return server{Server: srv, log: log}
}

// request is one request to the page.
type request struct {
	method, path string
	form         url.Values
	user, pass   string            // Basic credentials; none when user is ""
	header       map[string]string // e.g. Sec-Fetch-Site, Origin
}

// do sends req as a browser on the page would (Sec-Fetch-Site: same-origin for a
// POST, unless req.header says otherwise), with the test's credentials unless
// req.user is "-", and returns the status and the body.
func (s server) do(t *testing.T, req request) (int, string, http.Header) {
	t.Helper()
	var body io.Reader
	target := s.URL + req.path
	if req.method == http.MethodPost {
		body = strings.NewReader(req.form.Encode())
	} else if req.form != nil {
		target += "?" + req.form.Encode()
	}
	r, err := http.NewRequestWithContext(context.Background(), req.method, target, body)
	require.NoError(t, err)
	if req.method == http.MethodPost {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	switch req.user {
	case "":
		r.SetBasicAuth(operator, password)
	case "-":
	default:
		r.SetBasicAuth(req.user, req.pass)
	}
	for k, v := range req.header {
		if v == "" {
			r.Header.Del(k)
		} else {
			r.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(r)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b), resp.Header
}

// get is do with a GET of path and query.
func (s server) get(t *testing.T, path string, query url.Values) (int, string) {
	t.Helper()
	status, body, _ := s.do(t, request{method: http.MethodGet, path: path, form: query})
	return status, body
}

// withTenant adds the tenant to q, when there is one.
func withTenant(q url.Values, tenant string) url.Values {
	if q == nil {
		q = url.Values{}
	}
	if tenant != "" {
		q.Set("tenant", tenant)
	}
	return q
}

// offsetOf reads the stored next offset of one partition; -1 when none is stored.
func offsetOf(t *testing.T, ctx context.Context, store inbox.Store, consumer, topic string, partition int32) int64 {
	t.Helper()
	offsets, err := store.(inbox.OffsetStore).Offsets(ctx, consumer)
	require.NoError(t, err)
	for _, o := range offsets {
		if o.Topic == topic && o.Partition == partition {
			return o.Next
		}
	}
	return -1
}
