// Package oneline joins errors into one error whose text is one line, for the packages
// outside the root that report several invalid config fields at once: errors.Join
// separates them with newlines, which breaks a log line in two. The root package has its
// own join, which also drops the repeated "inbox: " prefix.
package oneline

import "strings"

// Join returns the non-nil errors as one error that wraps them all and says each, in
// order, separated by "; ": nil when all are nil, the error itself when only one is not.
// Newlines inside an error's text become spaces.
func Join(errs ...error) error {
	var kept []error
	for _, err := range errs {
		if err != nil {
			kept = append(kept, err)
		}
	}
	switch len(kept) {
	case 0:
		return nil
	case 1:
		if !strings.Contains(kept[0].Error(), "\n") {
			return kept[0]
		}
	}
	return joined(kept)
}

type joined []error

func (j joined) Error() string {
	texts := make([]string, len(j))
	for i, err := range j {
		texts[i] = strings.ReplaceAll(err.Error(), "\n", " ")
	}
	return strings.Join(texts, "; ")
}

func (j joined) Unwrap() []error { return j }
