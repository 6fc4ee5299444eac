// Package signing is how a worker proves a result: the canonical JSON that output hashes and
// signatures are computed over, the output hash, and the Ed25519 signature of a completion
// (docs/design.md §4). It imports only the standard library, so a worker program can use it
// without linking the broker.
package signing

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Canonical returns the canonical JSON of a value: object keys sorted, no insignificant
// whitespace, no HTML escaping, numbers as they were written. Workers in any language can
// produce the same bytes, which is what output hashes and signatures are computed over.
func Canonical(raw json.RawMessage) ([]byte, error) {
	// Without objects there are no keys to sort, and without escapes no strings to normalise:
	// removing whitespace is all there is to do, and much cheaper than decoding.
	if bytes.IndexByte(raw, '{') < 0 && bytes.IndexByte(raw, '\\') < 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, errors.New("trailing data after the JSON value")
	}
	return marshalCanonical(v)
}

func marshalCanonical(v any) ([]byte, error) {
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil { // maps encode with sorted keys
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// OutputHash is the lowercase hex SHA-256 of the canonical JSON of an output.
func OutputHash(output json.RawMessage) (string, error) {
	c := []byte(output)
	if !isCanonical(output) {
		var err error
		if c, err = Canonical(output); err != nil {
			return "", err
		}
	}
	sum := sha256.Sum256(c)
	var digits [2 * sha256.Size]byte
	hex.Encode(digits[:], sum[:])
	return string(digits[:]), nil
}

// isCanonical reports whether raw is its own canonical JSON without a copy: a valid value with
// no object (no keys to sort), no escape (no string to normalise) and no whitespace at all
// (none to remove, and none inside a string, where it would be kept). Most outputs of a
// completion are such ("null", a number, a short string), and Canonical would copy them.
func isCanonical(raw []byte) bool {
	return !bytes.ContainsAny(raw, "{\\ \t\r\n") && json.Valid(raw)
}

// SignedCompletion returns the bytes a worker signs: the canonical JSON of
// {"job_id","lease_id","nonce","output_hash"}.
func SignedCompletion(jobID, leaseID, nonce, outputHash string) []byte {
	b, _ := marshalCanonical(map[string]string{
		"job_id": jobID, "lease_id": leaseID, "nonce": nonce, "output_hash": outputHash,
	})
	return b
}

// SignCompletion signs a completion with a worker's private key; the result is base64.
func SignCompletion(key ed25519.PrivateKey, jobID, leaseID, nonce, outputHash string) string {
	return base64.StdEncoding.EncodeToString(ed25519.Sign(key, SignedCompletion(jobID, leaseID, nonce, outputHash)))
}

// DecodeBase64 decodes a key or signature as workers send them (seed 002's wire): standard or
// URL-safe base64, with or without padding. Anything else is an error, as is a mix of the two
// alphabets, a line break, or padding in the wrong place.
func DecodeBase64(s string) ([]byte, error) {
	trimmed := strings.TrimRight(s, "=")
	if pad := len(s) - len(trimmed); pad > 2 || (pad > 0 && len(s)%4 != 0) {
		return nil, errors.New("base64: bad padding")
	}
	if strings.ContainsAny(trimmed, "\r\n") {
		return nil, errors.New("base64: a line break")
	}
	enc := base64.RawStdEncoding
	if strings.ContainsAny(trimmed, "-_") {
		enc = base64.RawURLEncoding
	}
	return enc.Strict().DecodeString(trimmed)
}

// DecodePublicKey decodes an Ed25519 public key in any form DecodeBase64 takes.
func DecodePublicKey(s string) (ed25519.PublicKey, error) {
	k, err := DecodeBase64(s)
	if err != nil || len(k) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("not a base64 Ed25519 public key of %d bytes", ed25519.PublicKeySize)
	}
	return k, nil
}

// VerifyCompletion checks an Ed25519 signature by a public key, both in base64 (DecodeBase64).
func VerifyCompletion(publicKey, signature, jobID, leaseID, nonce, outputHash string) bool {
	pub, err := DecodePublicKey(publicKey)
	if err != nil {
		return false
	}
	sig, err := DecodeBase64(signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return false
	}
	return ed25519.Verify(pub, SignedCompletion(jobID, leaseID, nonce, outputHash), sig)
}
