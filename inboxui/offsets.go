package inboxui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/watermill-inbox/inbox"
)

// Resetting a stored offset, in two steps: the reset page (a GET, which changes
// nothing) shows the partition's offset and asks for the new one, then shows both for
// a confirmation, whose form POSTs the old and the new offset; the POST sets the new
// one only if the stored offset is still the old one, so that a confirmation made on a
// stale page, or sent twice, changes nothing.

// partitionRef names one partition of one consumer, read from a request.
type partitionRef struct {
	Consumer  string
	Topic     string
	Partition int32
}

func readPartition(r *http.Request) (partitionRef, error) {
	p := partitionRef{Consumer: r.FormValue("consumer"), Topic: r.FormValue("topic")}
	if p.Consumer == "" || p.Topic == "" {
		return p, errors.New("name the consumer, the topic and the partition (consumer=, topic=, partition=)")
	}
	n, err := strconv.ParseInt(r.FormValue("partition"), 10, 32)
	if err != nil {
		return p, fmt.Errorf("partition %q is not a partition number", r.FormValue("partition"))
	}
	p.Partition = int32(n)
	return p, nil
}

// find returns the stored offset of p, and whether there is one.
func (p partitionRef) find(ctx context.Context, store inbox.OffsetStore) (inbox.PartitionOffset, bool, error) {
	offsets, err := store.Offsets(ctx, p.Consumer)
	if err != nil {
		return inbox.PartitionOffset{}, false, err
	}
	for _, o := range offsets {
		if o.Topic == p.Topic && o.Partition == p.Partition {
			return o, true, nil
		}
	}
	return inbox.PartitionOffset{}, false, nil
}

// resetData is what reset.html shows.
type resetData struct {
	View    view
	Offset  inbox.PartitionOffset
	To      string // the new offset as typed
	Confirm bool   // To is valid: show the confirmation
	Delete  bool   // To is negative: the row is deleted
	Problem string // why To cannot be used
}

// offsetStore returns the store as an OffsetStore, or renders why it is not one.
func (h *Handler) offsetStore(w http.ResponseWriter, v view) (inbox.OffsetStore, bool) {
	store, ok := h.cfg.Store.(inbox.OffsetStore)
	if !ok {
		h.fail(w, v, http.StatusNotFound, "No offsets", errors.New("this store keeps no offsets (inbox.OffsetStore)"))
	}
	return store, ok
}

// resetPage is the first step: the form for the new offset, then the confirmation.
func (h *Handler) resetPage(w http.ResponseWriter, r *http.Request) {
	v := h.viewOf(r)
	store, ok := h.offsetStore(w, v)
	if !ok {
		return
	}
	p, err := readPartition(r)
	if err != nil {
		h.fail(w, v, http.StatusBadRequest, "Which offset?", err)
		return
	}
	o, found, err := p.find(tenantContext(r.Context(), v), store)
	if err != nil {
		h.fail(w, v, http.StatusInternalServerError, "Reading the offset", err)
		return
	}
	if !found {
		h.fail(w, v, http.StatusNotFound, "No such offset", fmt.Errorf("consumer %q keeps no offset for topic %q, partition %d", p.Consumer, p.Topic, p.Partition))
		return
	}
	data := resetData{View: v, Offset: o, To: r.FormValue("to")}
	if data.To != "" {
		to, err := strconv.ParseInt(data.To, 10, 64)
		switch {
		case err != nil:
			data.Problem = fmt.Sprintf("%q is not an offset: type a whole number (a negative one deletes the row)", data.To)
		case to == o.Next:
			data.Problem = fmt.Sprintf("the offset is %d already", o.Next)
		default:
			data.Confirm, data.Delete = true, to < 0
		}
	}
	h.render(w, v, http.StatusOK, "inbox: reset an offset", "reset", data)
}

// resetOffset is the confirmed reset, a POST.
func (h *Handler) resetOffset(w http.ResponseWriter, r *http.Request) ([]any, error) {
	v := h.viewOf(r)
	store, ok := h.offsetStore(w, v)
	if !ok {
		return nil, errors.New("the store keeps no offsets")
	}
	p, err := readPartition(r)
	if err != nil {
		h.fail(w, v, http.StatusBadRequest, "Which offset?", err)
		return nil, err
	}
	did := []any{"tenant", v.Tenant, "consumer", p.Consumer, "topic", p.Topic, "partition", p.Partition}
	from, errFrom := strconv.ParseInt(r.PostFormValue("from"), 10, 64)
	to, errTo := strconv.ParseInt(r.PostFormValue("to"), 10, 64)
	if errFrom != nil || errTo != nil {
		err := errors.New("the confirmation must carry the old and the new offset (from=, to=): reset from the offsets page")
		h.fail(w, v, http.StatusBadRequest, "Not reset", err)
		return did, err
	}
	did = append(did, "from", from, "to", to)
	ctx := tenantContext(r.Context(), v)
	o, found, err := p.find(ctx, store)
	if err == nil && (!found || o.Next != from) {
		now := "no offset is stored"
		if found {
			now = "it is " + strconv.FormatInt(o.Next, 10)
		}
		err := fmt.Errorf("the offset was %d when you confirmed and %s now: it moved since; look again before resetting", from, now)
		h.fail(w, v, http.StatusConflict, "Not reset", err)
		return did, err
	}
	if err == nil {
		_, err = store.SetOffset(ctx, p.Consumer, p.Topic, p.Partition, to)
	}
	if err != nil {
		h.fail(w, v, http.StatusInternalServerError, "Not reset", err)
		return did, err
	}
	text := fmt.Sprintf("Consumer %s, topic %s, partition %d: the next offset was %d and is %d now.", p.Consumer, p.Topic, p.Partition, from, to)
	if to < 0 {
		text = fmt.Sprintf("Consumer %s, topic %s, partition %d: the offset (%d) is deleted; the next record delivered is new whatever its offset.", p.Consumer, p.Topic, p.Partition, from)
	}
	h.render(w, v, http.StatusOK, "inbox: offset reset", "message", message{View: v, Heading: "Offset reset", Text: text, Back: v.Link("")})
	return did, nil
}
