package oneline_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/watermill-inbox/inbox/internal/oneline"
)

func TestJoin(t *testing.T) {
	t.Parallel()
	a, b := errors.New("Inbox is nil"), errors.New("Consumer is empty")
	tests := []struct {
		name string
		errs []error
		want string
	}{
		{name: "two on one line", errs: []error{a, nil, b}, want: "Inbox is nil; Consumer is empty"},
		{name: "one as it is", errs: []error{nil, a}, want: "Inbox is nil"},
		{name: "a joined one flattened", errs: []error{errors.Join(a, b)}, want: "Inbox is nil Consumer is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := oneline.Join(tt.errs...)
			require.EqualError(t, err, tt.want)
			for _, e := range tt.errs {
				if e != nil {
					require.ErrorIs(t, err, e)
				}
			}
		})
	}
	require.NoError(t, oneline.Join(nil, nil))
}
