package amqpkey_test

import (
	"testing"
	"time"

	amqpv2 "github.com/ThreeDotsLabs/watermill-amqp/v2/pkg/amqp"
	amqpv3 "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/amqpkey"
)

// Marshaler fits the Marshaler interface of both watermill-amqp versions.
var (
	_ amqpv2.Marshaler = amqpkey.Marshaler{}
	_ amqpv3.Marshaler = amqpkey.Marshaler{}
)

var inners = []struct {
	name  string
	inner amqpkey.Inner
}{
	{"built-in default", nil},
	{"watermill-amqp v2 DefaultMarshaler", amqpv2.DefaultMarshaler{}},
	{"watermill-amqp v3 DefaultMarshaler", amqpv3.DefaultMarshaler{}},
}

func TestUnmarshal(t *testing.T) {
	t.Parallel()
	deadAt := time.Date(2026, 11, 30, 1, 2, 3, 0, time.UTC)
	tests := []struct {
		name         string
		delivery     amqp091.Delivery
		wantUUID     string
		wantMetadata message.Metadata
		wantKey      string // amqpkey.MessageID; "" means ErrNoKey
	}{
		{
			name: "watermill message",
			delivery: amqp091.Delivery{Body: []byte("p"), Headers: amqp091.Table{
				"_watermill_message_uuid": "u-1", "trace": "t"}},
			wantUUID:     "u-1",
			wantMetadata: message.Metadata{"trace": "t", amqpkey.MetadataRedelivered: "false"},
		},
		{
			name:         "message_id property, no headers",
			delivery:     amqp091.Delivery{Body: []byte("p"), MessageId: "order-7"},
			wantMetadata: message.Metadata{amqpkey.MetadataMessageID: "order-7", amqpkey.MetadataRedelivered: "false"},
			wantKey:      "order-7",
		},
		{
			name:         "redelivered",
			delivery:     amqp091.Delivery{Body: []byte("p"), MessageId: "m", Redelivered: true},
			wantMetadata: message.Metadata{amqpkey.MetadataMessageID: "m", amqpkey.MetadataRedelivered: "true"},
			wantKey:      "m",
		},
		{
			name: "stale delivery headers from a forwarded message are replaced",
			delivery: amqp091.Delivery{Body: []byte("p"), Headers: amqp091.Table{
				amqpkey.MetadataMessageID: "forged", amqpkey.MetadataRedelivered: "true"}},
			wantMetadata: message.Metadata{amqpkey.MetadataRedelivered: "false"},
		},
		{
			name: "x-death table and other non-string headers",
			delivery: amqp091.Delivery{Body: []byte("p"), MessageId: "m", Headers: amqp091.Table{
				"x-death": []any{amqp091.Table{
					"count": int64(2), "reason": "rejected", "queue": "q", "time": deadAt,
					"routing-keys": []any{"q"}, "exchange": "",
				}},
				"x-first-death-reason": "rejected",
				"retries":              int32(3),
				"ratio":                float64(0.5),
				"urgent":               true,
				"price":                amqp091.Decimal{Scale: 2, Value: 12345},
				"sent":                 deadAt,
				"raw":                  []byte("bytes"),
				"none":                 nil,
			}},
			wantMetadata: message.Metadata{
				"x-death":                   `[{"count":2,"exchange":"","queue":"q","reason":"rejected","routing-keys":["q"],"time":"2026-11-30T01:02:03Z"}]`,
				"x-first-death-reason":      "rejected",
				"retries":                   "3",
				"ratio":                     "0.5",
				"urgent":                    "true",
				"price":                     "123.45",
				"sent":                      "2026-11-30T01:02:03Z",
				"raw":                       "bytes",
				"none":                      "",
				amqpkey.MetadataMessageID:   "m",
				amqpkey.MetadataRedelivered: "false",
			},
			wantKey: "m",
		},
	}
	for _, in := range inners {
		for _, tt := range tests {
			t.Run(in.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				msg, err := amqpkey.Marshaler{Inner: in.inner}.Unmarshal(tt.delivery)
				require.NoError(t, err)
				require.Equal(t, tt.wantUUID, msg.UUID)
				require.Equal(t, tt.wantMetadata, msg.Metadata)
				require.Equal(t, tt.delivery.Body, []byte(msg.Payload))

				key, err := amqpkey.MessageID(msg)
				if tt.wantKey == "" {
					require.ErrorIs(t, err, inbox.ErrNoKey)
				} else {
					require.NoError(t, err)
					require.Equal(t, tt.wantKey, key)
				}
				require.Equal(t, tt.delivery.Redelivered, amqpkey.IsRedelivered(msg))
			})
		}
	}
}

// The stock unmarshaler fails on the x-death header (so the subscriber would nack and
// requeue the message forever); the wrapper of the same unmarshaler does not.
func TestUnmarshalNonStringHeaderStockFails(t *testing.T) {
	t.Parallel()
	d := amqp091.Delivery{Body: []byte("p"), Headers: amqp091.Table{"x-death": []any{amqp091.Table{"count": int64(1)}}}}
	_, err := amqpv2.DefaultMarshaler{}.Unmarshal(d)
	require.Error(t, err)
	msg, err := amqpkey.Marshaler{Inner: amqpv2.DefaultMarshaler{}}.Unmarshal(d)
	require.NoError(t, err)
	require.Equal(t, `[{"count":1}]`, msg.Metadata.Get("x-death"))
}

func TestMarshalRoundTrip(t *testing.T) {
	t.Parallel()
	for _, in := range inners {
		t.Run(in.name, func(t *testing.T) {
			t.Parallel()
			m := amqpkey.Marshaler{Inner: in.inner}
			msg := message.NewMessage("u-9", []byte("payload"))
			msg.Metadata.Set("trace", "t")
			msg.Metadata.Set(amqpkey.MetadataMessageID, "from-an-earlier-delivery")
			msg.Metadata.Set(amqpkey.MetadataRedelivered, "true")

			pub, err := m.Marshal(msg)
			require.NoError(t, err)
			require.Equal(t, amqp091.Table{"_watermill_message_uuid": "u-9", "trace": "t"}, pub.Headers)
			require.Equal(t, amqp091.Persistent, pub.DeliveryMode)
			require.Equal(t, "from-an-earlier-delivery", msg.Metadata.Get(amqpkey.MetadataMessageID), "Marshal must not change the caller's message")

			got, err := m.Unmarshal(amqp091.Delivery{Headers: pub.Headers, Body: pub.Body})
			require.NoError(t, err)
			require.Equal(t, "u-9", got.UUID)
			require.Equal(t, message.Metadata{"trace": "t", amqpkey.MetadataRedelivered: "false"}, got.Metadata)
		})
	}
}

func TestStringHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		headers amqp091.Table
		want    amqp091.Table
	}{
		{"nil", nil, nil},
		{"strings only", amqp091.Table{"a": "1"}, amqp091.Table{"a": "1"}},
		{"ints", amqp091.Table{"a": int8(-1), "b": int16(2), "c": int64(1 << 40), "d": uint8(7)}, amqp091.Table{"a": "-1", "b": "2", "c": "1099511627776", "d": "7"}},
		{"float32", amqp091.Table{"f": float32(0.1)}, amqp091.Table{"f": "0.1"}},
		{"nested table", amqp091.Table{"t": amqp091.Table{"b": "x", "a": int32(1)}}, amqp091.Table{"t": `{"a":1,"b":"x"}`}},
		{"negative decimal", amqp091.Table{"d": amqp091.Decimal{Scale: 3, Value: -1500}}, amqp091.Table{"d": "-1.500"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, amqpkey.StringHeaders(tt.headers))
		})
	}
}
