package inboxhttp_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxhttp"
)

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		values  []string
		want    string
		noKey   bool
		wantErr string
	}{
		{name: "draft sf-string", values: []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, want: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{name: "escapes", values: []string{`"a\"b\\c"`}, want: `a"b\c`},
		{name: "spaces inside and around", values: []string{`  "a b"  `}, want: "a b"},
		{name: "bare token (Stripe)", values: []string{"key_123-abc"}, want: "key_123-abc"},
		{name: "missing", noKey: true},
		{name: "empty", values: []string{""}, noKey: true},
		{name: "two fields", values: []string{`"a"`, `"b"`}, wantErr: "2 Idempotency-Key headers"},
		{name: "unterminated", values: []string{`"abc`}, wantErr: "closing quote is missing"},
		{name: "trailing", values: []string{`"a";x=1`}, wantErr: "follows the closing quote"},
		{name: "bad escape", values: []string{`"a\n"`}, wantErr: "backslash"},
		{name: "bare with space", values: []string{"a b"}, wantErr: "neither a quoted string nor a bare token"},
		{name: "non-ASCII", values: []string{"\"caf\xc3\xa9\""}, wantErr: "not visible ASCII"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := http.NewRequest(http.MethodPost, "/", nil)
			require.NoError(t, err)
			for _, v := range tt.values {
				r.Header.Add("Idempotency-Key", v)
			}
			got, err := inboxhttp.IdempotencyKey(r, nil)
			switch {
			case tt.noKey:
				require.ErrorIs(t, err, inbox.ErrNoKey)
			case tt.wantErr != "":
				require.ErrorContains(t, err, tt.wantErr)
				require.NotErrorIs(t, err, inbox.ErrNoKey)
			default:
				require.NoError(t, err)
				require.Equal(t, tt.want, got)
			}
		})
	}
}

func FuzzIdempotencyKey(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b"`, "bare", `"`, `"\`, `""`, `"x" `} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		r, _ := http.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Idempotency-Key", v)
		key, err := inboxhttp.IdempotencyKey(r, nil)
		if err != nil {
			return
		}
		require.NotEmpty(t, key, "a key is never empty without an error")
		if trimmed := strings.TrimSpace(v); trimmed[0] == '"' { // round trip: quote it again
			quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
			r.Header.Set("Idempotency-Key", quoted)
			again, err := inboxhttp.IdempotencyKey(r, nil)
			require.NoError(t, err)
			require.Equal(t, key, again)
		}
	})
}

func TestWebhookKeys(t *testing.T) {
	t.Parallel()
	r, err := http.NewRequest(http.MethodPost, "/", nil)
	require.NoError(t, err)
	r.Header.Set("webhook-id", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W")
	r.Header.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	key, err := inboxhttp.WebhookID(r, nil)
	require.NoError(t, err)
	require.Equal(t, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", key)
	key, err = inboxhttp.GitHubDelivery(r, nil)
	require.NoError(t, err)
	require.Equal(t, "72d3162e-cc78-11e3-81ab-4c9367dc0958", key)
	_, err = inboxhttp.Header("X-Missing")(r, nil)
	require.ErrorIs(t, err, inbox.ErrNoKey)

	id := inboxhttp.JSONField("id")
	for _, tt := range []struct {
		body, want, wantErr string
		noKey               bool
	}{
		{body: `{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event"}`, want: "evt_1NG8Du2eZvKYlo2CUI79vXWy"},
		{body: `{"id":12345}`, want: "12345"},
		{body: `{"object":"event"}`, noKey: true},
		{body: `{"id":null}`, noKey: true},
		{body: `{"id":{"nested":1}}`, wantErr: "neither a string nor a number"},
		{body: `not json`, wantErr: "not a JSON object"},
	} {
		got, err := id(r, []byte(tt.body))
		switch {
		case tt.noKey:
			require.ErrorIs(t, err, inbox.ErrNoKey, tt.body)
		case tt.wantErr != "":
			require.ErrorContains(t, err, tt.wantErr, tt.body)
		default:
			require.NoError(t, err, tt.body)
			require.Equal(t, tt.want, got)
		}
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := inboxhttp.New(inboxhttp.Config{InFlight: 7, MaxRequestBody: -1, Methods: []string{}})
	require.ErrorContains(t, err, "inboxhttp: invalid config")
	for _, want := range []string{"Inbox is nil", "Consumer is empty", "InFlight is InFlightMode(7)", "MaxRequestBody is negative", "Methods is empty"} {
		require.ErrorContains(t, err, want)
	}
	require.Equal(t, 1, strings.Count(err.Error(), "inboxhttp:"), "one prefix: %v", err)
}

// Issue 19, defect 7: New accepts a consumer exactly when the inbox does (before, a NUL
// byte or invalid UTF-8 passed New, and every request then got 503).
func TestNewValidatesTheConsumerAsTheInboxDoes(t *testing.T) {
	t.Parallel()
	b := newBackend(t, "pgx")
	ib, err := inbox.New(inbox.Config{Store: b.store, Consumer: "http"})
	require.NoError(t, err)
	for _, consumer := range []string{"POST /payments", "a\x00b", "\xff\xfe", strings.Repeat("c", 255), strings.Repeat("c", 256), "é"} {
		_, newErr := inboxhttp.New(inboxhttp.Config{Inbox: ib, Consumer: consumer})
		_, processErr := ib.Process(context.Background(), consumer, "key-1", func(context.Context) error { return nil })
		if processErr != nil {
			require.ErrorContains(t, newErr, "inboxhttp: invalid config: Consumer", "%q: the inbox refuses it", consumer)
			require.Error(t, inbox.ValidateConsumer(consumer), "%q", consumer)
		} else {
			require.NoError(t, newErr, "%q: the inbox accepts it", consumer)
		}
	}
}
