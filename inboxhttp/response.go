package inboxhttp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/watermill-inbox/inbox"
)

// ErrResponseTooLarge is what the response writer's Write returns once the body would
// pass Config.MaxResponseBody. The request then fails with 500 and nothing is stored.
// Permanent (inbox.MarkPermanent): the same request gets the same response, too large
// again.
var ErrResponseTooLarge = inbox.MarkPermanent(errors.New("inboxhttp: the response body is larger than Config.MaxResponseBody"))

// response buffers what the handler writes. It is deliberately neither an http.Flusher
// nor an http.Hijacker, and has no Unwrap: a response that is stored must be complete
// before anything is sent, so http.ResponseController's Flush and Hijack report
// http.ErrNotSupported, and a streaming handler sends its stream at the end, whole.
type response struct {
	header  http.Header
	sent    http.Header // the header as it was when the status was written
	status  int
	body    bytes.Buffer
	max     int64
	tooBig  bool
	omitted map[string]bool
}

func newResponse(max int64, omitted map[string]bool) *response {
	return &response{header: http.Header{}, max: max, omitted: omitted}
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(status int) {
	if w.status != 0 || (status >= 100 && status < 200) { // informational: not stored
		return
	}
	w.status = status
	w.sent = w.header.Clone()
}

func (w *response) Write(p []byte) (int, error) {
	if w.status == 0 {
		if w.header.Get("Content-Type") == "" && len(p) > 0 { // as net/http would sniff it
			w.header.Set("Content-Type", http.DetectContentType(p))
		}
		w.WriteHeader(http.StatusOK)
	}
	if int64(w.body.Len()+len(p)) > w.max {
		w.tooBig = true
		return 0, ErrResponseTooLarge
	}
	return w.body.Write(p)
}

// finish completes a response whose handler wrote nothing, as net/http would: 200.
func (w *response) finish() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
}

// out returns the header the response goes out with, and is stored with: the header as
// it was when the status was written, and the trailers, as net/http takes them from a
// handler: keys with http.TrailerPrefix, set at any time, and the names the Trailer
// header declared, with their values as the handler left them. Trailers come out keyed
// with http.TrailerPrefix, which net/http sends as trailers wherever they are set.
func (w *response) out() http.Header {
	h := make(http.Header, len(w.sent))
	declared := map[string]bool{}
	for _, v := range w.sent.Values("Trailer") {
		for _, name := range strings.Split(v, ",") {
			if name = http.CanonicalHeaderKey(strings.TrimSpace(name)); name != "" {
				declared[name] = true
			}
		}
	}
	for name, values := range w.sent {
		if !declared[name] {
			h[name] = values
		}
	}
	for name, values := range w.header {
		switch {
		case strings.HasPrefix(name, http.TrailerPrefix):
			h[http.TrailerPrefix+http.CanonicalHeaderKey(name[len(http.TrailerPrefix):])] = values
		case declared[name]:
			h[http.TrailerPrefix+name] = values
		}
	}
	return h
}

// hopByHop headers describe one connection, not the response, and are never stored.
var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true,
}

const storedVersion = 1

// encode returns the stored form of the response: a version byte, the status (two bytes,
// big-endian), the header count and each header name and value with its length (uvarint),
// then the body as it is.
func (w *response) encode() []byte {
	header := w.out()
	out := make([]byte, 0, 64+w.body.Len())
	out = append(out, storedVersion)
	out = binary.BigEndian.AppendUint16(out, uint16(w.status))
	var n uint64
	for name, values := range header {
		if !w.keep(name) {
			continue
		}
		n += uint64(len(values))
	}
	out = binary.AppendUvarint(out, n)
	for name, values := range header {
		if !w.keep(name) {
			continue
		}
		for _, v := range values {
			out = binary.AppendUvarint(out, uint64(len(name)))
			out = append(out, name...)
			out = binary.AppendUvarint(out, uint64(len(v)))
			out = append(out, v...)
		}
	}
	return append(out, w.body.Bytes()...)
}

// keep reports whether a header (or a trailer, keyed with http.TrailerPrefix) is stored.
func (w *response) keep(name string) bool {
	name = strings.TrimPrefix(name, http.TrailerPrefix)
	return !hopByHop[name] && !w.omitted[name]
}

// stored is a response decoded from its stored form.
type stored struct {
	status int
	header http.Header
	body   []byte
}

func decode(b []byte) (stored, error) {
	if len(b) < 4 || b[0] != storedVersion {
		return stored{}, errors.New("inboxhttp: the key's stored output is not a response stored by inboxhttp (was the consumer name used by another inbox caller?)")
	}
	s := stored{status: int(binary.BigEndian.Uint16(b[1:3])), header: http.Header{}}
	b = b[3:]
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return stored{}, errors.New("inboxhttp: the stored response is truncated")
	}
	b = b[k:]
	next := func() (string, bool) {
		l, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < l {
			return "", false
		}
		v := string(b[k : k+int(l)])
		b = b[k+int(l):]
		return v, true
	}
	for range n {
		name, ok1 := next()
		value, ok2 := next()
		if !ok1 || !ok2 {
			return stored{}, errors.New("inboxhttp: the stored response is truncated")
		}
		s.header[name] = append(s.header[name], value)
	}
	s.body = b
	return s, nil
}

// write sends a response: the stored headers, the replay header when replayed, an exact
// Content-Length (unless there are trailers, which need a chunked body), the status and
// the body, then the trailers.
func write(w http.ResponseWriter, status int, header http.Header, body []byte, replayHeader string) error {
	h := w.Header()
	trailers := false
	for name, values := range header {
		h[name] = append([]string(nil), values...)
		trailers = trailers || strings.HasPrefix(name, http.TrailerPrefix)
	}
	if replayHeader != "" {
		h.Set(replayHeader, "true")
	}
	if status != http.StatusNoContent && status != http.StatusNotModified && !trailers {
		h.Set("Content-Length", strconv.Itoa(len(body)))
	}
	w.WriteHeader(status)
	if len(body) == 0 {
		return nil
	}
	if _, err := w.Write(body); err != nil {
		return fmt.Errorf("inboxhttp: writing the response: %w", err)
	}
	return nil
}
