package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// Errors the store returns, wrapped with what it was doing. Match them with errors.Is.
// Each is permanent or transient, as inbox.Permanent reports (docs/errors.md).
var (
	// ErrLeaseLost means a commit was refused, nothing the handler queued applied,
	// because another delivery took the key (the handler outlived Config.Lease) or
	// committed it, or Forget deleted the key since the claim. Transient: the message is
	// nacked, and its redelivery is a duplicate or processes once.
	ErrLeaseLost = errors.New("the claim was lost before the commit")

	// ErrCrossSlot means a command the handler queued touches a key outside the claim's
	// Redis Cluster hash slot, which one script cannot reach atomically. Nothing was
	// applied. Permanent: every delivery queues the same commands. Put Tx.Tag() in the
	// handler's keys, or choose Config.HashTag so that the inbox keys carry the tag the
	// handler's keys already have.
	ErrCrossSlot = contract.MarkPermanent(errors.New("a handler key is outside the claim's hash slot"))

	// ErrCommandRefused means a command the handler queued was refused before anything
	// was sent: unknown to the server (a subcommand included), a wrong number of
	// arguments, a command Redis does not allow in a script (e.g. WATCH, MULTI,
	// SUBSCRIBE, SCRIPT EXISTS, CONFIG GET), or one whose keys the server cannot name.
	// Nothing was applied. Permanent: every delivery queues the same commands.
	ErrCommandRefused = contract.MarkPermanent(errors.New("a queued command was refused"))

	// ErrCommandFailed means a command the handler queued failed while the commit ran
	// (e.g. WRONGTYPE). Redis rolls nothing back: the other commands and the key were
	// applied, so the redelivery is a duplicate; the failed command's effect is lost.
	// Permanent: retrying finds the key committed.
	ErrCommandFailed = contract.MarkPermanent(errors.New("a queued command failed at commit"))

	// ErrNotReplicated means the commit was applied on the primary but fewer replicas
	// than Config.Replicas acknowledged it within Config.ReplicaTimeout. The message is
	// nacked; its redelivery is a duplicate unless the primary is lost before it
	// replicates, in which case it processes once on the new primary. Transient.
	ErrNotReplicated = errors.New("fewer replicas than Config.Replicas acknowledged the commit")

	// ErrUnreachable means Redis could not be reached: the store fails closed, and the
	// message is nacked without being processed (unless
	// Config.DangerouslyProcessWithoutDedupWhenUnreachable). Transient.
	ErrUnreachable = errors.New("redis unreachable")

	// ErrNoJoin is returned by ClaimIn: Redis has no transaction a caller could begin
	// and hand to the inbox to join. Permanent: remove the transaction from the
	// message context.
	ErrNoJoin = contract.MarkPermanent(errors.New("a Redis store cannot join a transaction from the context"))
)

// unreachable reports whether err means the server could not be reached (a refused or
// broken connection, a network timeout), as opposed to an answer from the server.
func unreachable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false // the caller gave up: its context, not the server
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
