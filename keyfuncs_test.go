package inbox_test

import (
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
)

func newMsg(uuid string, payload string, metadata map[string]string) *message.Message {
	msg := message.NewMessage(uuid, []byte(payload))
	for k, v := range metadata {
		msg.Metadata.Set(k, v)
	}
	return msg
}

func TestKeyFuncs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		key     inbox.KeyFunc
		msg     *message.Message
		want    string
		wantErr string // a part of the error, which always wraps ErrNoKey
	}{
		{name: "uuid", key: inbox.KeyFromUUID, msg: newMsg("u-1", "", nil), want: "u-1"},
		{name: "uuid empty", key: inbox.KeyFromUUID, msg: newMsg("", "", nil), wantErr: "UUID is empty"},
		{name: "metadata", key: inbox.KeyFromMetadata("x-idempotency-key"), msg: newMsg("", "", map[string]string{"x-idempotency-key": "abc"}), want: "abc"},
		{name: "metadata missing", key: inbox.KeyFromMetadata("x-idempotency-key"), msg: newMsg("u", "", nil), wantErr: `"x-idempotency-key"`},
		{name: "metadata nil map", key: inbox.KeyFromMetadata("k"), msg: &message.Message{UUID: "u"}, wantErr: `"k"`},
		{name: "cloudevents kafka binary", key: inbox.KeyFromCloudEvents, msg: newMsg("", "{}", map[string]string{"ce_id": "evt-1", "ce_source": "/orders"}), want: "/orders evt-1"},
		{name: "cloudevents id only", key: inbox.KeyFromCloudEvents, msg: newMsg("", "{}", map[string]string{"ce_id": "evt-1"}), want: "evt-1"},
		{name: "cloudevents http", key: inbox.KeyFromCloudEvents, msg: newMsg("", "", map[string]string{"ce-id": "evt-2", "ce-source": "s"}), want: "s evt-2"},
		{name: "cloudevents amqp underscore", key: inbox.KeyFromCloudEvents, msg: newMsg("", "", map[string]string{"cloudEvents_id": "evt-3", "cloudEvents_source": "s"}), want: "s evt-3"},
		{name: "cloudevents amqp colon", key: inbox.KeyFromCloudEvents, msg: newMsg("", "", map[string]string{"cloudEvents:id": "evt-4"}), want: "evt-4"},
		{name: "cloudevents structured", key: inbox.KeyFromCloudEvents, msg: newMsg("", `{"specversion":"1.0","id":"evt-5","source":"/billing","data":{}}`, nil), want: "/billing evt-5"},
		{name: "cloudevents json without specversion", key: inbox.KeyFromCloudEvents, msg: newMsg("", `{"id":"evt-6"}`, nil), wantErr: "CloudEvents"},
		{name: "cloudevents none", key: inbox.KeyFromCloudEvents, msg: newMsg("u", `not json`, nil), wantErr: "CloudEvents"},
		{name: "json string", key: inbox.KeyFromJSON("data.transaction_id"), msg: newMsg("", `{"data":{"transaction_id":"tx-9"}}`, nil), want: "tx-9"},
		{name: "json number as written", key: inbox.KeyFromJSON("data.transaction_id"), msg: newMsg("", `{"data":{"transaction_id":12345678901234567890}}`, nil), want: "12345678901234567890"},
		{name: "json top level", key: inbox.KeyFromJSON("id"), msg: newMsg("", `{"id":"a"}`, nil), want: "a"},
		{name: "json malformed", key: inbox.KeyFromJSON("id"), msg: newMsg("", `{"id":`, nil), wantErr: "not JSON"},
		{name: "json missing", key: inbox.KeyFromJSON("data.id"), msg: newMsg("", `{"data":{}}`, nil), wantErr: "missing"},
		{name: "json not an object", key: inbox.KeyFromJSON("data.id"), msg: newMsg("", `{"data":[1]}`, nil), wantErr: "not inside an object"},
		{name: "json object value", key: inbox.KeyFromJSON("data"), msg: newMsg("", `{"data":{"a":1}}`, nil), wantErr: "not a string or number"},
		{name: "json bool value", key: inbox.KeyFromJSON("ok"), msg: newMsg("", `{"ok":true}`, nil), wantErr: "not a string or number"},
		{name: "first of takes the first found", key: inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromCloudEvents), msg: newMsg("", "", map[string]string{"ce_id": "evt-7"}), want: "evt-7"},
		{name: "first of prefers order", key: inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromCloudEvents), msg: newMsg("u-2", "", map[string]string{"ce_id": "evt-7"}), want: "u-2"},
		{name: "first of none", key: inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromMetadata("k")), msg: newMsg("", "", nil), wantErr: "none of 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.key(tt.msg)
			if tt.wantErr != "" {
				require.ErrorIs(t, err, inbox.ErrNoKey)
				require.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// FuzzKeyFuncs proves the key functions never panic and are deterministic: the same
// message gives the same key (or the same error) every time.
func FuzzKeyFuncs(f *testing.F) {
	f.Add("u-1", []byte(`{"specversion":"1.0","id":"e","source":"s","data":{"transaction_id":1}}`), "ce_id", "evt")
	f.Add("", []byte(`{"data":{"transaction_id":"x"}}`), "x-idempotency-key", "")
	f.Add("", []byte("\xff\x00{"), "cloudEvents:id", strings.Repeat("k", 300))
	funcs := []inbox.KeyFunc{
		inbox.KeyFromUUID,
		inbox.KeyFromMetadata("x-idempotency-key"),
		inbox.KeyFromCloudEvents,
		inbox.KeyFromJSON("data.transaction_id"),
		inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromCloudEvents, inbox.KeyFromJSON("id")),
	}
	f.Fuzz(func(t *testing.T, uuid string, payload []byte, metaKey, metaValue string) {
		msg := message.NewMessage(uuid, payload)
		msg.Metadata.Set(metaKey, metaValue)
		for _, key := range funcs {
			k1, err1 := key(msg)
			k2, err2 := key(msg.Copy())
			if k1 != k2 || (err1 == nil) != (err2 == nil) {
				t.Fatalf("not deterministic: %q/%v then %q/%v", k1, err1, k2, err2)
			}
			if err1 != nil && k1 != "" {
				t.Fatalf("an error with a key: %q, %v", k1, err1)
			}
		}
	})
}
