package natskey_test

import (
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/natskey"
)

var _ inbox.KeyFunc = natskey.MsgID

func TestUnmarshal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		header   nats.Header
		wantUUID string
		wantMeta message.Metadata
	}{
		{"Watermill message", nats.Header{"_watermill_message_uuid": {"u-1"}, "k": {"v"}}, "u-1", message.Metadata{"k": "v"}},
		{"Nats-Msg-Id kept", nats.Header{nats.MsgIdHdr: {"evt-1"}}, "", message.Metadata{natskey.MetadataMsgID: "evt-1"}},
		{"a header with two values joined", nats.Header{"x-tag": {"a", "b"}}, "", message.Metadata{"x-tag": `["a","b"]`}},
		{"a header naming our metadata is overwritten", nats.Header{natskey.MetadataMsgID: {"forged"}, natskey.MetadataNumDelivered: {"9"}}, "", message.Metadata{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msg, err := natskey.Unmarshaler{}.Unmarshal(&nats.Msg{Subject: "s", Data: []byte("p"), Header: tt.header})
			require.NoError(t, err)
			require.Equal(t, tt.wantUUID, msg.UUID)
			require.Equal(t, "p", string(msg.Payload))
			require.Equal(t, tt.wantMeta, msg.Metadata)
		})
	}
}

func TestUnmarshalInnerError(t *testing.T) {
	t.Parallel()
	_, err := natskey.Unmarshaler{Inner: failing{}}.Unmarshal(&nats.Msg{Subject: "s"})
	require.ErrorIs(t, err, errInner)
}

var errInner = errors.New("inner")

type failing struct{}

func (failing) Unmarshal(*nats.Msg) (*message.Message, error) { return nil, errInner }

func TestMsgID(t *testing.T) {
	t.Parallel()
	msg := message.NewMessage("", nil)
	_, err := natskey.MsgID(msg)
	require.ErrorIs(t, err, inbox.ErrNoKey)
	msg.Metadata.Set(natskey.MetadataMsgID, "evt-1")
	key, err := natskey.MsgID(msg)
	require.NoError(t, err)
	require.Equal(t, "evt-1", key)
}

func TestMaxDeliveries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		delivered string
		wantErr   bool
	}{
		{"count unknown", "", false},
		{"first delivery", "1", false},
		{"at the limit", "3", false},
		{"over the limit", "4", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msg := message.NewMessage("u-1", nil)
			if tt.delivered != "" {
				msg.Metadata.Set(natskey.MetadataNumDelivered, tt.delivered)
			}
			called := false
			_, err := natskey.MaxDeliveries(3)(func(*message.Message) ([]*message.Message, error) {
				called = true
				return nil, nil
			})(msg)
			if tt.wantErr {
				require.ErrorIs(t, err, natskey.ErrTooManyDeliveries)
				require.EqualError(t, err, "natskey: delivered too many times: message u-1 delivered 4 times, limit 3")
				require.False(t, called)
				return
			}
			require.NoError(t, err)
			require.True(t, called)
		})
	}
	require.Panics(t, func() { natskey.MaxDeliveries(0) })
}
