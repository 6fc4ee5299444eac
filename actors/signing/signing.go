// Package signing is how a worker proves a result: the canonical JSON that output hashes and
// signatures are computed over, the output hash, and the Ed25519 signature of a completion
// (DESIGN §4). It imports only the standard library, so a worker program can use it without
// linking the broker.
package signing

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
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
	c, err := Canonical(output)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
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

// VerifyCompletion checks a base64 Ed25519 signature by a base64 public key.
func VerifyCompletion(publicKey, signature, jobID, leaseID, nonce, outputHash string) bool {
	pub, err := base64.StdEncoding.DecodeString(publicKey)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return false
	}
	sig, err := base64.StdEncoding.DecodeString(signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return false
	}
	return ed25519.Verify(pub, SignedCompletion(jobID, leaseID, nonce, outputHash), sig)
}
