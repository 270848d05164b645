package inboxhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/watermill-inbox/inbox"
)

// KeyFunc derives a request's idempotency key; body is the whole request body (the
// middleware has read it, and r.Body reads it again). A request without a key returns an
// error wrapping inbox.ErrNoKey, or an empty key: 400, or a pass-through when
// Config.Optional is set. Any other error is a malformed key: 400 whatever Optional says.
// The error's text is the client's to read, in the 400's detail (without an
// "inboxhttp: " prefix and inbox.ErrNoKey's text): say what the client must send, and
// nothing else.
type KeyFunc func(r *http.Request, body []byte) (string, error)

// TenantFromHeader takes a request's tenant from the header name (one value), for
// Config.Tenant. A request without it fails with an error wrapping inbox.ErrNoTenant
// (400).
func TenantFromHeader(name string) func(r *http.Request) (string, error) {
	return func(r *http.Request) (string, error) {
		values := r.Header.Values(name)
		switch {
		case len(values) > 1:
			return "", fmt.Errorf("%w: %d %s headers: send one", inbox.ErrNoTenant, len(values), name)
		case len(values) == 0 || strings.TrimSpace(values[0]) == "":
			return "", fmt.Errorf("%w: the %s header is missing or empty", inbox.ErrNoTenant, name)
		}
		return strings.TrimSpace(values[0]), nil
	}
}

// IdempotencyKey takes the key from the Idempotency-Key header. The draft
// (draft-ietf-httpapi-idempotency-key-header-07) makes its value a structured-field
// string, `Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`, which is unquoted
// and unescaped here; a bare value without quotes, as Stripe's clients send, is taken as
// it is. It is the default KeyFunc.
func IdempotencyKey(r *http.Request, _ []byte) (string, error) {
	raw, err := singleHeader(r, "Idempotency-Key")
	if err != nil || raw == "" {
		return "", err
	}
	if raw[0] != '"' {
		for i := 0; i < len(raw); i++ {
			if c := raw[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' || c == ',' || c == ';' {
				return "", fmt.Errorf("inboxhttp: the Idempotency-Key header is neither a quoted string nor a bare token (byte %q at %d): send it as a structured-field string, e.g. \"8e03978e-...\"", c, i)
			}
		}
		return raw, nil
	}
	key, err := parseSFString(raw)
	if err != nil {
		return "", fmt.Errorf("inboxhttp: the Idempotency-Key header is not a structured-field string: %w", err)
	}
	if key == "" {
		return "", fmt.Errorf(`%w: the Idempotency-Key header is the empty string ""`, inbox.ErrNoKey)
	}
	return key, nil
}

// parseSFString parses an RFC 8941 sf-string that makes up the whole of s.
func parseSFString(s string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			i++
			if i == len(s) || (s[i] != '"' && s[i] != '\\') {
				return "", errors.New(`a backslash escapes only " or \`)
			}
			b.WriteByte(s[i])
		case c == '"':
			if rest := strings.TrimSpace(s[i+1:]); rest != "" {
				return "", fmt.Errorf("%q follows the closing quote", rest)
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("byte %q is not visible ASCII", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("the closing quote is missing")
}

// Header takes the key from the header name, as it is (trimmed of spaces). Two fields of
// that name are refused as ambiguous.
func Header(name string) KeyFunc {
	return func(r *http.Request, _ []byte) (string, error) {
		return singleHeader(r, name)
	}
}

// WebhookID takes the key from the webhook-id header of the Standard Webhooks spec, the
// same on every retry of one delivery. Verify the webhook's signature first (a
// middleware outside this one), so that a forged id cannot mark a delivery as done.
var WebhookID = Header("webhook-id")

// GitHubDelivery takes the key from GitHub's X-GitHub-Delivery header, the GUID of one
// delivery, which GitHub keeps when a delivery is redelivered.
var GitHubDelivery = Header("X-GitHub-Delivery")

// JSONField takes the key from a top-level field of a JSON request body, a string or a
// number: JSONField("id") for a Stripe event (evt_...), which Stripe sends again, with
// the same id, on every retry of that event.
func JSONField(name string) KeyFunc {
	return func(_ *http.Request, body []byte) (string, error) {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(body, &fields); err != nil {
			return "", fmt.Errorf("inboxhttp: the body is not a JSON object, so it has no key field %q: %w", name, err)
		}
		raw, ok := fields[name]
		if !ok || bytes.Equal(raw, []byte("null")) {
			return "", fmt.Errorf("%w: the JSON body has no field %q", inbox.ErrNoKey, name)
		}
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			return s, nil
		}
		var n json.Number
		if err := json.Unmarshal(raw, &n); err == nil {
			return n.String(), nil
		}
		return "", fmt.Errorf("inboxhttp: the JSON body's key field %q is neither a string nor a number", name)
	}
}

// ScopedKey returns the key stored for key sent by the client scope (Config.Scope): the
// scope's length, the scope and the key, separated by colons ("5:alice:8e03978e-..."), so
// that no two (scope, key) pairs give the same stored key. Use it to find a scoped key in
// the table, e.g. to Forget it.
func ScopedKey(scope, key string) string {
	return strconv.Itoa(len(scope)) + ":" + scope + ":" + key
}

// clientText is err's text as the client may read it in a 400's detail: what the KeyFunc
// found missing or malformed, without the library's prefixes ("inboxhttp: ", and the
// text of inbox.ErrNoKey, which the problem's sentence already says).
func clientText(err error) string {
	text := strings.TrimPrefix(err.Error(), "inboxhttp: ")
	return strings.TrimPrefix(text, inbox.ErrNoKey.Error()+": ")
}

func singleHeader(r *http.Request, name string) (string, error) {
	values := r.Header.Values(name)
	switch len(values) {
	case 0:
		return "", fmt.Errorf("%w: no %s header", inbox.ErrNoKey, name)
	case 1:
		v := strings.TrimSpace(values[0])
		if v == "" {
			return "", fmt.Errorf("%w: the %s header is empty", inbox.ErrNoKey, name)
		}
		return v, nil
	}
	return "", fmt.Errorf("inboxhttp: %d %s headers: send one", len(values), name)
}
