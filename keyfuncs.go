package inbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
)

// KeyFunc derives a message's inbox key: the id that is the same on every delivery of one
// message and differs between messages. It returns an error wrapping ErrNoKey when the
// message has none. An empty key is treated as no key.
type KeyFunc func(msg *message.Message) (string, error)

// KeyFromUUID takes the key from the Watermill message UUID. It is the default.
// Subscribers fill the UUID from the _watermill_message_uuid header that Watermill
// publishers set; a message from any other producer has an empty UUID, which is an
// error, not a key: use KeyFromCloudEvents, KeyFromMetadata or FirstOf for those.
func KeyFromUUID(msg *message.Message) (string, error) {
	if msg.UUID == "" {
		return "", fmt.Errorf("%w: the message UUID is empty (was it published by a non-Watermill producer? try inbox.FirstOf with KeyFromCloudEvents or KeyFromMetadata)", ErrNoKey)
	}
	return msg.UUID, nil
}

// KeyFromMetadata takes the key from the metadata field, e.g. "x-idempotency-key".
func KeyFromMetadata(field string) KeyFunc {
	return func(msg *message.Message) (string, error) {
		if v := msg.Metadata[field]; v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%w: metadata field %q is missing or empty", ErrNoKey, field)
	}
}

// CloudEvents attribute names as transport bindings carry them in metadata: Kafka binary
// mode (ce_), HTTP (ce-), AMQP (cloudEvents_ and cloudEvents:).
var cloudEventsPrefixes = []string{"ce_", "ce-", "cloudEvents_", "cloudEvents:"}

// KeyFromCloudEvents takes the key from a CloudEvent: source + " " + id, or the id alone
// when the source is absent (the spec makes source and id unique together). It reads
// binary-mode attributes from metadata (Kafka ce_id/ce_source, HTTP ce-id, AMQP
// cloudEvents_id or cloudEvents:id) and, failing those, a structured-mode JSON payload
// (one with "specversion", "id" and optionally "source").
func KeyFromCloudEvents(msg *message.Message) (string, error) {
	for _, prefix := range cloudEventsPrefixes {
		if id := msg.Metadata[prefix+"id"]; id != "" {
			return cloudEventKey(msg.Metadata[prefix+"source"], id), nil
		}
	}
	var event struct {
		SpecVersion json.RawMessage `json:"specversion"`
		ID          string          `json:"id"`
		Source      string          `json:"source"`
	}
	if json.Unmarshal(msg.Payload, &event) == nil && event.SpecVersion != nil && event.ID != "" {
		return cloudEventKey(event.Source, event.ID), nil
	}
	return "", fmt.Errorf("%w: no CloudEvents id (metadata ce_id, ce-id, cloudEvents_id, cloudEvents:id, or a structured JSON payload with specversion and id)", ErrNoKey)
}

func cloudEventKey(source, id string) string {
	if source == "" {
		return id
	}
	return source + " " + id
}

// KeyFromJSON takes the key from a field of a JSON payload, named by a dotted path such as
// "data.transaction_id". The field must be a string or a number; a number is taken as
// written ("42", "1e3"), so keep the producer's formatting stable.
func KeyFromJSON(path string) KeyFunc {
	steps := strings.Split(path, ".")
	return func(msg *message.Message) (string, error) {
		dec := json.NewDecoder(bytes.NewReader(msg.Payload))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return "", fmt.Errorf("%w: payload is not JSON (looking for %q): %v", ErrNoKey, path, err)
		}
		for _, step := range steps {
			obj, ok := v.(map[string]any)
			if !ok {
				return "", fmt.Errorf("%w: JSON field %q: %q is not inside an object", ErrNoKey, path, step)
			}
			if v, ok = obj[step]; !ok {
				return "", fmt.Errorf("%w: JSON field %q is missing", ErrNoKey, path)
			}
		}
		switch v := v.(type) {
		case string:
			return v, nil
		case json.Number:
			return v.String(), nil
		default:
			return "", fmt.Errorf("%w: JSON field %q is a %T, not a string or number", ErrNoKey, path, v)
		}
	}
}

// FirstOf returns the first non-empty key found by funcs, in order. When none finds one it
// returns an error wrapping ErrNoKey that joins what each looked for.
func FirstOf(funcs ...KeyFunc) KeyFunc {
	return func(msg *message.Message) (string, error) {
		var reasons []string
		for _, f := range funcs {
			key, err := f(msg)
			if err == nil && key != "" {
				return key, nil
			}
			if err != nil { // each says it found no key: the error says that once, first
				reasons = append(reasons, strings.TrimPrefix(err.Error(), ErrNoKey.Error()+": "))
			}
		}
		return "", fmt.Errorf("%w: none of %d key functions found one (%s)", ErrNoKey, len(funcs), strings.Join(reasons, "; "))
	}
}
