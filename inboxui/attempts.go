package inboxui

import (
	"errors"
	"net/http"

	"github.com/watermill-inbox/inbox"
)

// attemptsPage lists one consumer's unfinished attempts, the oldest first, with their
// start times and ages (inbox.AttemptLister).
func (h *Handler) attemptsPage(w http.ResponseWriter, r *http.Request) {
	v := h.viewOf(r)
	consumer := r.FormValue("consumer")
	lister, ok := h.cfg.Store.(inbox.AttemptLister)
	if !ok {
		h.fail(w, v, http.StatusNotFound, "No attempts", errors.New("this store keeps no attempts with their start times (inbox.AttemptLister)"))
		return
	}
	if consumer == "" {
		h.fail(w, v, http.StatusBadRequest, "No consumer", errors.New("name the consumer whose attempts to list (?consumer=)"))
		return
	}
	list, err := lister.Attempts(tenantContext(r.Context(), v), consumer, h.cfg.AttemptLimit)
	if err != nil {
		h.fail(w, v, http.StatusInternalServerError, "Attempts of "+consumer, err)
		return
	}
	h.render(w, v, http.StatusOK, "inbox: attempts of "+consumer, "attempts", struct {
		View     view
		Consumer string
		Attempts []inbox.Attempt
		Limit    int
		Full     bool
	}{v, consumer, list, h.cfg.AttemptLimit, len(list) == h.cfg.AttemptLimit})
}
