package inbox

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
)

// storedMessage is one produced message as the store keeps it with the key, as JSON.
// JSON strings hold only valid UTF-8 (encoding/json turns other bytes into U+FFFD), so
// a UUID, metadata key or value that is not valid UTF-8 goes, as bytes, into the
// fields that end in "_bytes" (base64 in the JSON) instead. Outputs stored before those
// fields existed decode as they did.
type storedMessage struct {
	UUID          string            `json:"uuid"`
	UUIDBytes     []byte            `json:"uuid_bytes,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	MetadataBytes [][2][]byte       `json:"metadata_bytes,omitempty"`
	Payload       []byte            `json:"payload"`
}

// encodeOutput returns the bytes stored with a key for the messages a handler produced,
// or nil when it produced none (nothing is then written).
func encodeOutput(msgs []*message.Message) ([]byte, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	stored := make([]storedMessage, len(msgs))
	for i, m := range msgs {
		s := storedMessage{UUID: m.UUID, Payload: m.Payload}
		if !utf8.ValidString(m.UUID) {
			s.UUID, s.UUIDBytes = "", []byte(m.UUID)
		}
		for k, v := range m.Metadata {
			if utf8.ValidString(k) && utf8.ValidString(v) {
				if s.Metadata == nil {
					s.Metadata = make(map[string]string, len(m.Metadata))
				}
				s.Metadata[k] = v
			} else {
				s.MetadataBytes = append(s.MetadataBytes, [2][]byte{[]byte(k), []byte(v)})
			}
		}
		stored[i] = s
	}
	out, err := json.Marshal(stored)
	if err != nil {
		return nil, fmt.Errorf("inbox: encoding produced messages: %w", err)
	}
	return out, nil
}

// decodeOutput rebuilds the produced messages stored with a key, with their UUIDs, so the
// router publishes them again as the same messages, byte for byte.
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
		uuid := s.UUID
		if s.UUIDBytes != nil {
			uuid = string(s.UUIDBytes)
		}
		msgs[i] = message.NewMessage(uuid, s.Payload)
		for k, v := range s.Metadata {
			msgs[i].Metadata.Set(k, v)
		}
		for _, kv := range s.MetadataBytes {
			msgs[i].Metadata.Set(string(kv[0]), string(kv[1]))
		}
	}
	return msgs, nil
}
