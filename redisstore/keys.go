package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Every key of one claim carries one hash tag, so that on Redis Cluster they all live in
// one slot and each script touches a single slot:
//
//	<prefix>c:{<tag>}:<n>:<consumer>:<key>   the claim: a hash of t (ms), f, o, k (the
//	                                         lease token that committed) and e (the
//	                                         commands that failed) once committed; n
//	                                         (fence counter); g and x (the last Forget's
//	                                         token and answer)
//	<prefix>l:{<tag>}:...                    the lease: the holder's random token, PX Lease
//	<prefix>s:{<tag>}:...                    the started attempts (MaxAttempts): a set of
//	                                         attempt tokens, expiring with the claim
//	<prefix>w:{<tag>}:...                    the waiting duplicates: a set of claim tokens
//	<prefix>r:{<tag>}:...                    the release list waiters block on
//
// <n> is the consumer name's length in bytes, so that consumer "a:b" with key "c" and
// consumer "a" with key "b:c" never share a key. The tag is Config.HashTag's result.
// (Earlier versions kept an attempt counter at a: and a waiter count in the claim's
// field w; both are ignored and expire.)

// Key kinds.
const (
	kindClaim    = "c"
	kindLease    = "l"
	kindAttempts = "s"
	kindWaiters  = "w"
	kindRelease  = "r"
)

// claimKeys names the Redis keys of one (consumer, key).
type claimKeys struct {
	tag  string // the hash tag, without braces
	base string // "{tag}:<n>:<consumer>:<key>"
	pfx  string
}

func (s *Store) keys(consumer, key string) claimKeys {
	tag := s.cfg.HashTag(consumer, key)
	return claimKeys{
		tag:  tag,
		base: "{" + tag + "}:" + strconv.Itoa(len(consumer)) + ":" + consumer + ":" + key,
		pfx:  s.cfg.Prefix,
	}
}

func (k claimKeys) name(kind string) string { return k.pfx + kind + ":" + k.base }

// DefaultHashTag is the default Config.HashTag: the consumer and the key, or their
// SHA-256 when they contain a brace (which would end the tag early).
func DefaultHashTag(consumer, key string) string {
	tag := strconv.Itoa(len(consumer)) + ":" + consumer + ":" + key
	if strings.ContainsAny(tag, "{}") {
		sum := sha256.Sum256([]byte(tag))
		return hex.EncodeToString(sum[:16])
	}
	return tag
}

// parseConsumer returns the consumer of a claim key named by claimKeys, for Stats.
func parseConsumer(prefix, name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, prefix+kindClaim+":{")
	if !ok {
		return "", false
	}
	end := strings.IndexByte(rest, '}')
	if end < 0 || !strings.HasPrefix(rest[end+1:], ":") {
		return "", false
	}
	rest = rest[end+2:]
	colon := strings.IndexByte(rest, ':')
	if colon < 0 {
		return "", false
	}
	n, err := strconv.Atoi(rest[:colon])
	if err != nil || n < 0 || colon+1+n > len(rest) {
		return "", false
	}
	return rest[colon+1 : colon+1+n], true
}

// Slot returns the Redis Cluster hash slot of key, as CLUSTER KEYSLOT computes it: the
// CRC16 of the key's hash tag (the part between the first '{' and the next '}', when it
// is not empty), or of the whole key, modulo 16384.
func Slot(key string) int {
	if start := strings.IndexByte(key, '{'); start >= 0 {
		if end := strings.IndexByte(key[start+1:], '}'); end > 0 {
			key = key[start+1 : start+1+end]
		}
	}
	return int(crc16(key) % 16384)
}

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
