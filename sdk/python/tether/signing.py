"""Proof of a result (docs/design.md §4): the canonical JSON that output hashes and signatures
are computed over, the output hash, and the Ed25519 signature of a completion.

Signing needs PyNaCl or cryptography; hashing needs neither.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from typing import Any, Tuple


def canonical_json(value: Any) -> bytes:
    """The canonical JSON of a value, as the server computes it: object keys sorted, no
    whitespace, no HTML escaping, non-ASCII as UTF-8 (U+2028 and U+2029 escaped). NaN and the
    infinities are not JSON and are refused."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"),
                      allow_nan=False)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").encode("utf-8")


def output_hash(value: Any) -> str:
    """The lowercase hex SHA-256 of the canonical JSON of an output."""
    return hashlib.sha256(canonical_json(value)).hexdigest()


def signed_completion(job_id: str, lease_id: str, nonce: str, output_hash_hex: str) -> bytes:
    """The bytes a worker signs for a completion."""
    return canonical_json({"job_id": job_id, "lease_id": lease_id, "nonce": nonce,
                           "output_hash": output_hash_hex})


class SigningUnavailable(RuntimeError):
    """Neither PyNaCl nor cryptography is installed, so no result can be signed."""


class Signer:
    """An Ed25519 private key that signs completions. ``seed`` is its 32-byte seed (raw, or in
    standard or URL-safe base64); Go's 64-byte private keys are taken too (seed, then public key)."""

    def __init__(self, seed: bytes):
        if len(seed) == 64:
            seed = seed[:32]
        if len(seed) != 32:
            raise ValueError("tether: an Ed25519 private key is a 32-byte seed (or a 64-byte key)")
        self._seed = bytes(seed)
        self._sign, self.public_key_raw = _backend(self._seed)

    @classmethod
    def from_base64(cls, text: str) -> "Signer":
        return cls(decode_base64(text.strip()))

    @classmethod
    def from_file(cls, path: str) -> "Signer":
        """Reads a private key: the PEM file ``tether worker keygen`` writes (PKCS #8), or a
        seed in base64."""
        with open(path) as f:
            text = f.read()
        if "-----BEGIN PRIVATE KEY-----" in text:
            body = text.split("-----BEGIN PRIVATE KEY-----", 1)[1].split("-----END PRIVATE KEY-----", 1)[0]
            der = base64.b64decode("".join(body.split()))
            if len(der) != len(_PKCS8_PREFIX) + 32 or not der.startswith(_PKCS8_PREFIX):
                raise ValueError(f"tether: {path} is not an Ed25519 private key in PKCS #8")
            return cls(der[len(_PKCS8_PREFIX):])
        return cls.from_base64(text)

    def to_file(self, path: str) -> None:
        """Writes the private key as ``tether worker keygen`` does (PEM, PKCS #8, mode 0600),
        refusing to replace a file: a worker's key must outlive the process that made it."""
        der = _PKCS8_PREFIX + self._seed
        lines = [base64.b64encode(der).decode()[i:i + 64] for i in range(0, 64, 64)]
        text = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(lines) + "\n-----END PRIVATE KEY-----\n"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)

    @classmethod
    def generate(cls) -> "Signer":
        """A new key; keep it with :meth:`to_file`, since the server takes only results
        signed by the key the worker registered."""
        return cls(os.urandom(32))

    @property
    def public_key(self) -> str:
        """The public key in standard base64, as registration takes it."""
        return base64.b64encode(self.public_key_raw).decode()

    def sign_completion(self, job_id: str, lease_id: str, nonce: str, output_hash_hex: str) -> str:
        return base64.b64encode(self._sign(signed_completion(job_id, lease_id, nonce, output_hash_hex))).decode()


# The DER of a PKCS #8 Ed25519 private key before its 32-byte seed (RFC 8410).
_PKCS8_PREFIX = bytes.fromhex("302e020100300506032b657004220420")


def decode_base64(text: str) -> bytes:
    """Standard or URL-safe base64, padded or not."""
    alt = b"-_" if ("-" in text or "_" in text) else None
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=alt, validate=True)


def _backend(seed: bytes) -> Tuple[Any, bytes]:
    try:
        import nacl.signing  # PyNaCl
        key = nacl.signing.SigningKey(seed)
        return (lambda msg: key.sign(msg).signature), bytes(key.verify_key)
    except ImportError:
        pass
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        key = Ed25519PrivateKey.from_private_bytes(seed)
        pub = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return key.sign, pub
    except ImportError:
        pass
    raise SigningUnavailable("tether: signing a result needs PyNaCl or cryptography; install "
                             "one (pip install pynacl, or apt install python3-nacl)")
