// Package secret encrypts values the hub stores at rest, such as uploaded
// kubeconfigs, with envelope encryption (the "SMS" of the EMCO seeds).
//
// A Keyring holds one key-encryption key (KEK) read from a key file on the
// hub's disk. Every Seal makes a fresh random data-encryption key (DEK),
// encrypts the plaintext with it using AES-256-GCM, and wraps the DEK with
// the KEK, also using AES-256-GCM. The result, a Sealed value, is safe to
// store in etcd: it holds only ciphertext, nonces and the KEK's ID.
//
// The additional authenticated data (aad) given to Seal must be given again
// to Open. Callers pass the storage key of the object the secret belongs to,
// so that a ciphertext copied under another object's key does not decrypt.
//
// No function of this package puts key material or plaintext in an error.
package secret

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/atoll-edge/atoll/internal/errs"
)

// KeySize is the size in bytes of a key-encryption key and of a
// data-encryption key (AES-256).
const KeySize = 32

// Version is the format version of the Sealed values this package writes.
const Version = 1

// NonceSize is the size in bytes of the AES-GCM nonces this package uses.
const NonceSize = 12

// wrappedKeySize is the size of Sealed.WrappedKey: the nonce used to wrap the
// DEK, the encrypted DEK and the GCM tag.
const wrappedKeySize = NonceSize + KeySize + 16

// decryptMsg is the one message Open gives for every authentication failure,
// so that an attacker learns nothing about what was wrong.
const decryptMsg = "secret cannot be decrypted: wrong key or tampered data"

// Sealed is an encrypted value as stored. Its []byte fields marshal to JSON
// as base64 text.
type Sealed struct {
	// Version is the format version; Open accepts only Version.
	Version int `json:"v"`
	// KeyID is the ID of the key-encryption key that wrapped the DEK.
	KeyID string `json:"kid"`
	// WrappedKey is the DEK encrypted with the KEK: a 12-byte nonce followed
	// by the AES-GCM ciphertext and tag, with the key ID as additional data.
	WrappedKey []byte `json:"dek"`
	// Nonce is the 12-byte AES-GCM nonce used with the DEK.
	Nonce []byte `json:"nonce"`
	// Ciphertext is the plaintext encrypted with the DEK, tag included.
	Ciphertext []byte `json:"ct"`
}

// Keyring holds the hub's key-encryption key. It is safe for concurrent use.
// Its String and GoString methods print only the key ID.
type Keyring struct {
	id  string
	kek cipher.AEAD
}

// NewKeyring returns a Keyring for a 32-byte key-encryption key. The key is
// not retained by reference: the caller may clear its slice afterwards.
func NewKeyring(key []byte) (*Keyring, error) {
	if len(key) != KeySize {
		return nil, errs.New(errs.Invalid, "key-encryption key must be %d bytes, not %d", KeySize, len(key))
	}
	aead, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	return &Keyring{id: KeyID(key), kek: aead}, nil
}

// KeyID returns the ID of a key: the hex encoding of the first 8 bytes of
// its SHA-256 digest. The ID names the key without revealing it.
func KeyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

// ID returns the ID of the keyring's key-encryption key.
func (k *Keyring) ID() string { return k.id }

// String returns a description of the keyring that names only its key ID.
func (k *Keyring) String() string { return "secret.Keyring{kid: " + k.id + "}" }

// GoString is like String, so that %#v does not print key material either.
func (k *Keyring) GoString() string { return k.String() }

// Seal encrypts plaintext under a fresh data-encryption key and wraps that
// key with the keyring's key. The same aad must be given to Open.
func (k *Keyring) Seal(plaintext, aad []byte) (Sealed, error) {
	dek := make([]byte, KeySize)
	defer clear(dek)
	if _, err := rand.Read(dek); err != nil {
		return Sealed{}, fmt.Errorf("generate data-encryption key: %w", err)
	}
	data, err := newGCM(dek)
	if err != nil {
		return Sealed{}, err
	}
	nonce, err := randomNonce()
	if err != nil {
		return Sealed{}, err
	}
	ct := data.Seal(nil, nonce, plaintext, aad)

	wrapNonce, err := randomNonce()
	if err != nil {
		return Sealed{}, err
	}
	wrapped := k.kek.Seal(wrapNonce, wrapNonce, dek, []byte(k.id))

	return Sealed{
		Version:    Version,
		KeyID:      k.id,
		WrappedKey: wrapped,
		Nonce:      nonce,
		Ciphertext: ct,
	}, nil
}

// Open decrypts a value made by Seal with the same key and aad. A value of
// another version or sealed with another key gives an error of kind
// errs.Invalid that names the key ID needed; a wrong aad or any change to the
// value gives an error of kind errs.Invalid with no details.
func (k *Keyring) Open(s Sealed, aad []byte) ([]byte, error) {
	if s.Version != Version {
		return nil, errs.New(errs.Invalid, "secret has format version %d but this hub reads only version %d; upgrade the hub", s.Version, Version)
	}
	if s.KeyID != k.id {
		kid := s.KeyID
		if len(kid) > 2*len(k.id) {
			kid = kid[:2*len(k.id)] + "..."
		}
		return nil, errs.New(errs.Invalid, "secret was sealed with key %q but the hub's key is %q; start the hub with the key file whose key has ID %q", kid, k.id, kid)
	}
	if len(s.WrappedKey) != wrappedKeySize || len(s.Nonce) != NonceSize {
		return nil, errs.New(errs.Invalid, decryptMsg)
	}
	dek, err := k.kek.Open(nil, s.WrappedKey[:NonceSize], s.WrappedKey[NonceSize:], []byte(k.id))
	if err != nil {
		return nil, errs.New(errs.Invalid, decryptMsg)
	}
	defer clear(dek)
	data, err := newGCM(dek)
	if err != nil {
		return nil, err
	}
	pt, err := data.Open(nil, s.Nonce, s.Ciphertext, aad)
	if err != nil {
		return nil, errs.New(errs.Invalid, decryptMsg)
	}
	return pt, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		// Only a wrong key length fails, and callers check it; the error
		// names the length only.
		return nil, fmt.Errorf("create AES cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("create AES-GCM: %w", err)
	}
	return aead, nil
}

func randomNonce() ([]byte, error) {
	nonce := make([]byte, NonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("generate nonce: %w", err)
	}
	return nonce, nil
}
