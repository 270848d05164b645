package inboxui

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
)

// BasicAuth returns a Config.Authorize that lets in the requests carrying user and
// password as HTTP Basic credentials, naming the operator user, and answers the others
// with ErrNoCredentials (401, so that the browser asks). The comparison takes the same
// time whatever the credentials. Use it over HTTPS, or on a loopback address as "inbox
// ui" does: Basic credentials travel in clear. It panics when user or password is empty,
// which would let anyone in.
func BasicAuth(user, password string) func(*http.Request) (string, error) {
	if user == "" || password == "" {
		panic("inboxui: BasicAuth needs a user name and a password")
	}
	wantUser, wantPass := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	return func(r *http.Request) (string, error) {
		u, p, ok := r.BasicAuth()
		gotUser, gotPass := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		if ok && subtle.ConstantTimeCompare(gotUser[:], wantUser[:])&subtle.ConstantTimeCompare(gotPass[:], wantPass[:]) == 1 {
			return user, nil
		}
		return "", fmt.Errorf("%w: wrong or missing Basic credentials", ErrNoCredentials)
	}
}
