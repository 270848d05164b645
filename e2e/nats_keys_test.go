package e2e_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/internal/brokertest"
	"github.com/watermill-inbox/inbox/natskey"
)

// A Watermill message is keyed by its UUID; messages published with nats.go directly are
// keyed by their Nats-Msg-Id header, kept by natskey.Unmarshaler (watermill-nats'
// NATSMarshaler drops it). The producer's retry after the stream's duplicate window is
// stored by JetStream and skipped by the inbox; a header with two values does not stop
// the message.
func TestNATSKeys(t *testing.T) {
	t.Parallel()
	url := brokertest.NATSURL(t)
	s := newSetup(t)
	c := natsConsumer{Stream: brokertest.Name("stream"), Durable: brokertest.Name("durable"), AckWait: time.Second, AckWaitTimeout: 10 * time.Second}
	js := brokertest.JetStream(t, url)
	_, err := js.AddStream(&nats.StreamConfig{Name: c.Stream, Subjects: []string{c.Stream}, Duplicates: 100 * time.Millisecond})
	require.NoError(t, err)
	brokertest.DeleteStreamOnCleanup(t, url, c.Stream)
	addNATSConsumer(t, url, c)

	wm := message.NewMessage(watermill.NewUUID(), []byte("watermill"))
	require.NoError(t, natsPublisher(t, url).Publish(c.Stream, wm))
	raw := func(id, body string, extra nats.Header) {
		m := nats.NewMsg(c.Stream)
		m.Data = []byte(body)
		m.Header.Set(nats.MsgIdHdr, id)
		for k, v := range extra {
			m.Header[k] = v
		}
		ack, err := js.PublishMsg(m)
		require.NoError(t, err)
		require.False(t, ack.Duplicate, "JetStream dropped %s as a duplicate", id)
	}
	raw("evt-1", "raw 1", nil)
	raw("evt-2", "raw 2", nats.Header{"X-Tag": {"a", "b"}})
	time.Sleep(300 * time.Millisecond) // past the stream's 100 ms duplicate window
	raw("evt-1", "raw 1", nil)         // the producer retried

	var outcomes brokertest.Outcomes
	rec := &recorder{}
	ib := s.inbox(t, inbox.FirstOf(inbox.KeyFromUUID, natskey.MsgID), &outcomes)
	runRouter(t, func(r *message.Router) {
		r.AddMiddleware(rec.middleware, ib.Middleware)
		r.AddConsumerHandler("ledger", c.Stream, natsSubscriber(t, url, c), func(m *message.Message) error {
			return s.ledger.Apply(m.Context(), "nats", string(m.Payload))
		})
	})
	require.Eventually(t, func() bool { return len(rec.all()) >= 4 }, wait, 10*time.Millisecond)

	for _, d := range rec.all() {
		require.NoError(t, d.Err, "payload %q", d.Payload)
	}
	require.Equal(t, 3, outcomes.Count(inbox.OutcomeProcessed))
	require.Equal(t, 1, outcomes.Count(inbox.OutcomeDuplicate))
	require.ElementsMatch(t, []string{wm.UUID, "evt-1", "evt-2"}, brokertest.Keys(t, s.pool, s.inboxTable, "ledger"))
	require.Equal(t, []string{"watermill", "raw 1", "raw 2"}, ledgerRefs(t, s), "each applied once, in stream order")
	tagged := rec.where(func(d delivery) bool { return d.Payload == "raw 2" })
	require.Equal(t, `["a","b"]`, tagged[0].Metadata["X-Tag"])
}

// ledgerRefs returns the ledger's refs in the order they were applied.
func ledgerRefs(t *testing.T, s setup) []string {
	t.Helper()
	rows, err := s.pool.Query(t.Context(), `SELECT ref FROM `+s.ledgerTable+` ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var refs []string
	for rows.Next() {
		var ref string
		require.NoError(t, rows.Scan(&ref))
		refs = append(refs, ref)
	}
	return refs
}
