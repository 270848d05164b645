package rediskey_test

import (
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/rediskey"
)

func TestUnmarshal(t *testing.T) {
	t.Parallel()
	wm := message.NewMessage("u-1", []byte("p"))
	wm.Metadata.Set("k", "v")
	values, err := redisstream.DefaultMarshallerUnmarshaller{}.Marshal("s", wm)
	require.NoError(t, err)
	// go-redis returns field values as strings.
	asRead := map[string]any{}
	for k, v := range values {
		switch v := v.(type) {
		case []byte:
			asRead[k] = string(v)
		default:
			asRead[k] = v
		}
	}

	tests := []struct {
		name        string
		u           rediskey.Unmarshaller
		values      map[string]any
		wantUUID    string
		wantPayload string
		wantMeta    message.Metadata
	}{
		{"Watermill entry", rediskey.Unmarshaller{}, asRead, "u-1", "p", message.Metadata{"k": "v"}},
		{"plain entry", rediskey.Unmarshaller{}, map[string]any{"event_id": "e-1", "payload": "body", "n": int64(3)}, "", "body", message.Metadata{"event_id": "e-1", "n": "3"}},
		{"plain entry without payload", rediskey.Unmarshaller{}, map[string]any{"event_id": "e-1"}, "", "", message.Metadata{"event_id": "e-1"}},
		{"payload field named", rediskey.Unmarshaller{PayloadField: "data"}, map[string]any{"data": "body", "payload": "meta"}, "", "body", message.Metadata{"payload": "meta"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msg, err := tt.u.Unmarshal(tt.values)
			require.NoError(t, err)
			require.Equal(t, tt.wantUUID, msg.UUID)
			require.Equal(t, tt.wantPayload, string(msg.Payload))
			require.Equal(t, tt.wantMeta, msg.Metadata)
		})
	}
}

// A plain entry (XADD orders * event_id order-42-paid payload {...}) keyed by its
// event_id field.
func ExampleUnmarshaller() {
	msg, err := rediskey.Unmarshaller{}.Unmarshal(map[string]any{"event_id": "order-42-paid", "payload": `{"amount":190}`})
	if err != nil {
		panic(err)
	}
	key, err := inbox.FirstOf(inbox.KeyFromUUID, inbox.KeyFromMetadata("event_id"))(msg)
	fmt.Println(key, err, string(msg.Payload))
	// Output: order-42-paid <nil> {"amount":190}
}
