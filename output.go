package inbox

import (
	"encoding/json"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
)

// storedMessage is one produced message as the store keeps it with the key.
type storedMessage struct {
	UUID     string            `json:"uuid"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Payload  []byte            `json:"payload"`
}

// encodeOutput returns the bytes stored with a key for the messages a handler produced,
// or nil when it produced none (nothing is then written).
func encodeOutput(msgs []*message.Message) ([]byte, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	stored := make([]storedMessage, len(msgs))
	for i, m := range msgs {
		stored[i] = storedMessage{UUID: m.UUID, Metadata: m.Metadata, Payload: m.Payload}
	}
	out, err := json.Marshal(stored)
	if err != nil {
		return nil, fmt.Errorf("inbox: encoding produced messages: %w", err)
	}
	return out, nil
}

// decodeOutput rebuilds the produced messages stored with a key, with their UUIDs, so the
// router publishes them again as the same messages.
func decodeOutput(out []byte) ([]*message.Message, error) {
	if len(out) == 0 {
		return nil, nil
	}
	var stored []storedMessage
	if err := json.Unmarshal(out, &stored); err != nil {
		return nil, fmt.Errorf("inbox: decoding stored produced messages: %w", err)
	}
	msgs := make([]*message.Message, len(stored))
	for i, s := range stored {
		msgs[i] = message.NewMessage(s.UUID, s.Payload)
		for k, v := range s.Metadata {
			msgs[i].Metadata.Set(k, v)
		}
	}
	return msgs, nil
}
