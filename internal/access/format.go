package access

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
)

// The token format. A token is one printable string
//
//	svcpf_<id>_<secret>
//
// where id is 16 lowercase hex digits (64 random bits: the token's public
// name, the database key, what lists and audit records show) and secret is
// 64 lowercase hex digits (256 random bits, crypto/rand). The id in the
// string lets a verifier find the one stored token to compare with, instead
// of hashing against every row; the fixed prefix lets secret scanners (and
// people) recognise a leaked svc-pf token. Only SHA-256(secret) is stored.
const (
	tokenPrefix = "svcpf_"
	idLen       = 16
	secretLen   = 64
	// TokenLen is the length of every token string.
	TokenLen = len(tokenPrefix) + idLen + 1 + secretLen
)

// Hash is the stored form of a secret: its SHA-256. A plain fast hash is
// enough here, where a password would need a slow one (bcrypt, argon2):
// the secret is 256 random bits, so no dictionary or brute force over the
// input space is possible, and a fast hash keeps verification within the
// request budget.
type Hash [sha256.Size]byte

// HashSecret hashes the secret part of a token: the 32 bytes its hex
// digits stand for, which is one SHA-256 block where the 64 digits
// themselves would be two. A string that is not 64 hex digits (never a
// parsed token's) is hashed as it is.
func HashSecret(secret string) Hash {
	var raw [secretLen / 2]byte
	if len(secret) == secretLen && lowerHex(secret) {
		for i := range raw {
			raw[i] = nibble(secret[2*i])<<4 | nibble(secret[2*i+1])
		}
		return sha256.Sum256(raw[:])
	}
	return sha256.Sum256([]byte(secret))
}

// nibble is the value of a lowercase hex digit.
func nibble(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}

// ParseToken splits a token string into its id and secret. It refuses
// anything but the exact format, so what reaches the store is always a
// well-formed id.
func ParseToken(tok string) (id, secret string, err error) {
	if len(tok) != TokenLen || tok[:len(tokenPrefix)] != tokenPrefix || tok[len(tokenPrefix)+idLen] != '_' {
		return "", "", ErrUnauthorized
	}
	id = tok[len(tokenPrefix) : len(tokenPrefix)+idLen]
	secret = tok[len(tokenPrefix)+idLen+1:]
	if !lowerHex(id) || !lowerHex(secret) {
		return "", "", ErrUnauthorized
	}
	return id, secret, nil
}

// ValidID reports whether id has the form of a token id.
func ValidID(id string) bool { return len(id) == idLen && lowerHex(id) }

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// generate returns a new id, secret and the token string that joins them.
func generate() (id, secret, tok string) {
	var b [idLen/2 + secretLen/2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	id = hex.EncodeToString(b[:idLen/2])
	secret = hex.EncodeToString(b[idLen/2:])
	return id, secret, tokenPrefix + id + "_" + secret
}

// GenerateToken returns a fresh token string in the format above, for a
// value that must exist before the service starts (SVCPF_ADMIN_TOKEN).
func GenerateToken() string {
	_, _, tok := generate()
	return tok
}
