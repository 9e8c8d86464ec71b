package secret

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/atoll-edge/atoll/internal/errs"
)

func newTestKeyring(t testing.TB, fill byte) *Keyring {
	t.Helper()
	k, err := NewKeyring(bytes.Repeat([]byte{fill}, KeySize))
	if err != nil {
		t.Fatalf("NewKeyring: %v", err)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	k := newTestKeyring(t, 1)
	other := newTestKeyring(t, 2)
	plaintext := []byte("apiVersion: v1\nkind: Config\n")
	aad := []byte("/atoll/cluster-providers/p/clusters/c")

	flip := func(b []byte, i int) []byte {
		b = bytes.Clone(b)
		b[i%len(b)] ^= 0x01
		return b
	}

	tests := []struct {
		name     string
		keyring  *Keyring
		mutate   func(s *Sealed)
		aad      []byte
		wantKind errs.Kind
		wantMsg  string
	}{
		{name: "round trip", keyring: k, aad: aad},
		{name: "wrong aad", keyring: k, aad: []byte("/atoll/other"), wantKind: errs.Invalid, wantMsg: decryptMsg},
		{name: "nil aad", keyring: k, aad: nil, wantKind: errs.Invalid, wantMsg: decryptMsg},
		{name: "tampered ciphertext", keyring: k, aad: aad, mutate: func(s *Sealed) { s.Ciphertext = flip(s.Ciphertext, 3) }, wantKind: errs.Invalid, wantMsg: decryptMsg},
		{name: "tampered tag", keyring: k, aad: aad, mutate: func(s *Sealed) { s.Ciphertext = flip(s.Ciphertext, len(s.Ciphertext)-1) }, wantKind: errs.Invalid, wantMsg: decryptMsg},
		{name: "truncated ciphertext", keyring: k, aad: aad, mutate: func(s *Sealed) { s.Ciphertext = s.Ciphertext[:5] }, wantKind: errs.Invalid, wantMsg: decryptMsg},
		{name: "tampered nonce", keyring: k, aad: aad, mutate: func(s *Sealed) { s.Nonce = flip(s.Nonce, 0) }, wantKind: errs.Invalid, wantMsg: decryptMsg},
		{name: "short nonce", keyring: k, aad: aad, mutate: func(s *Sealed) { s.Nonce = s.Nonce[:8] }, wantKind: errs.Invalid, wantMsg: decryptMsg},
		{name: "tampered dek", keyring: k, aad: aad, mutate: func(s *Sealed) { s.WrappedKey = flip(s.WrappedKey, 20) }, wantKind: errs.Invalid, wantMsg: decryptMsg},
		{name: "tampered dek nonce", keyring: k, aad: aad, mutate: func(s *Sealed) { s.WrappedKey = flip(s.WrappedKey, 0) }, wantKind: errs.Invalid, wantMsg: decryptMsg},
		{name: "missing dek", keyring: k, aad: aad, mutate: func(s *Sealed) { s.WrappedKey = nil }, wantKind: errs.Invalid, wantMsg: decryptMsg},
		{name: "key id relabelled", keyring: other, aad: aad, mutate: func(s *Sealed) { s.KeyID = other.ID() }, wantKind: errs.Invalid, wantMsg: decryptMsg},
		{name: "different keyring", keyring: other, aad: aad, wantKind: errs.Invalid, wantMsg: "start the hub with the key file whose key has ID \"" + k.ID() + "\""},
		{name: "unknown version", keyring: k, aad: aad, mutate: func(s *Sealed) { s.Version = 2 }, wantKind: errs.Invalid, wantMsg: "format version 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := k.Seal(plaintext, aad)
			if err != nil {
				t.Fatalf("Seal: %v", err)
			}
			if tt.mutate != nil {
				tt.mutate(&s)
			}
			got, err := tt.keyring.Open(s, tt.aad)
			if tt.wantKind == "" {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				if !bytes.Equal(got, plaintext) {
					t.Fatalf("Open = %q, want %q", got, plaintext)
				}
				return
			}
			if err == nil {
				t.Fatalf("Open succeeded, want an error of kind %q", tt.wantKind)
			}
			if got != nil {
				t.Errorf("Open returned plaintext with an error")
			}
			if !errors.Is(err, errs.E(tt.wantKind)) {
				t.Errorf("Open error %q has kind %q, want %q", err, errs.KindOf(err), tt.wantKind)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Open error %q does not contain %q", err, tt.wantMsg)
			}
		})
	}
}

func TestSealFresh(t *testing.T) {
	k := newTestKeyring(t, 1)
	pt := []byte("same plaintext")
	a, err := k.Seal(pt, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := k.Seal(pt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a.Ciphertext, b.Ciphertext) || bytes.Equal(a.Nonce, b.Nonce) || bytes.Equal(a.WrappedKey, b.WrappedKey) {
		t.Errorf("two Seals of the same plaintext share ciphertext, nonce or wrapped key")
	}
	if a.Version != Version || a.KeyID != k.ID() || len(a.Nonce) != NonceSize || len(a.WrappedKey) != wrappedKeySize {
		t.Errorf("unexpected Sealed shape: %+v", a)
	}
}

func TestSealedJSON(t *testing.T) {
	k := newTestKeyring(t, 1)
	marker := "MARKER-plaintext-7f3a9c"
	s, err := k.Seal([]byte(marker), []byte("aad"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, enc := range []string{marker, base64.StdEncoding.EncodeToString([]byte(marker)), fmt.Sprintf("%x", marker)} {
		if bytes.Contains(js, []byte(enc)) {
			t.Errorf("JSON of Sealed contains the plaintext: %s", js)
		}
	}
	var fields map[string]any
	if err := json.Unmarshal(js, &fields); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"v", "kid", "dek", "nonce", "ct"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("JSON of Sealed lacks field %q: %s", f, js)
		}
	}
	var back Sealed
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	got, err := k.Open(back, []byte("aad"))
	if err != nil || string(got) != marker {
		t.Fatalf("Open after JSON round trip = %q, %v", got, err)
	}
}

func TestKeyringString(t *testing.T) {
	key := bytes.Repeat([]byte{0xAB}, KeySize)
	k, err := NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		out := fmt.Sprintf(verb, k)
		if !strings.Contains(out, k.ID()) || strings.Contains(strings.ToLower(out), "abab") {
			t.Errorf("Sprintf(%s, keyring) = %q", verb, out)
		}
	}
	if _, err := NewKeyring(key[:16]); !errors.Is(err, errs.E(errs.Invalid)) {
		t.Errorf("NewKeyring with a 16-byte key: err = %v, want kind invalid", err)
	}
}

func TestLoadOrCreateKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys", "kek")
	k1, err := LoadOrCreateKeyFile(path)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" {
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("key file mode = %#o, want 0600", perm)
		}
		di, err := os.Stat(filepath.Dir(path))
		if err != nil {
			t.Fatal(err)
		}
		if perm := di.Mode().Perm(); perm != 0o700 {
			t.Errorf("key directory mode = %#o, want 0700", perm)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(data, []byte("\n")) {
		t.Errorf("key file does not end in a newline")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(data)))
	if err != nil || len(raw) != KeySize {
		t.Fatalf("key file is not base64 of %d bytes (err %v, %d bytes)", KeySize, err, len(raw))
	}
	if KeyID(raw) != k1.ID() {
		t.Errorf("keyring ID %s does not match the key in the file", k1.ID())
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("key directory holds %d entries, want only the key file (temporary file left behind?)", len(entries))
	}

	k2, err := LoadOrCreateKeyFile(path)
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	k3, err := LoadKeyFile(path)
	if err != nil {
		t.Fatalf("LoadKeyFile: %v", err)
	}
	if k2.ID() != k1.ID() || k3.ID() != k1.ID() {
		t.Fatalf("reloaded key IDs %s, %s differ from created %s", k2.ID(), k3.ID(), k1.ID())
	}
	s, err := k1.Seal([]byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k3.Open(s, nil); err != nil {
		t.Fatalf("reloaded keyring cannot open what the created one sealed: %v", err)
	}
}

func TestLoadKeyFile(t *testing.T) {
	key := bytes.Repeat([]byte{0x5A}, KeySize)
	b64 := base64.StdEncoding.EncodeToString(key)
	secretText := "MARKER-content-4b1d9e"

	tests := []struct {
		name     string
		content  []byte // nil: no file
		mode     os.FileMode
		wantKind errs.Kind
		wantMsg  string
		notFound bool
	}{
		{name: "raw 32 bytes", content: key, mode: 0o600},
		{name: "base64", content: []byte(b64), mode: 0o600},
		{name: "base64 with whitespace", content: []byte("  \n" + b64 + "\r\n\n"), mode: 0o400},
		{name: "missing", notFound: true, wantKind: errs.NotFound, wantMsg: "does not exist"},
		{name: "group readable", content: []byte(b64), mode: 0o640, wantKind: errs.Invalid, wantMsg: "chmod 600"},
		{name: "world readable", content: []byte(b64), mode: 0o604, wantKind: errs.Invalid, wantMsg: "chmod 600"},
		{name: "empty", content: []byte{}, mode: 0o600, wantKind: errs.Invalid, wantMsg: "is empty"},
		{name: "raw 31 bytes", content: key[:31], mode: 0o600, wantKind: errs.Invalid, wantMsg: "neither 32 raw bytes nor base64"},
		{name: "base64 of 16 bytes", content: []byte(base64.StdEncoding.EncodeToString(key[:16])), mode: 0o600, wantKind: errs.Invalid, wantMsg: "key of 16 bytes"},
		{name: "not base64", content: []byte(secretText + "!!"), mode: 0o600, wantKind: errs.Invalid, wantMsg: "neither 32 raw bytes nor base64"},
		{name: "base64 with marker", content: []byte(base64.StdEncoding.EncodeToString([]byte(secretText))), mode: 0o600, wantKind: errs.Invalid, wantMsg: "key of 21 bytes"},
		{name: "too large", content: bytes.Repeat([]byte(secretText), 1000), mode: 0o600, wantKind: errs.Invalid, wantMsg: "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "kek")
			if !tt.notFound {
				if err := os.WriteFile(path, tt.content, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, tt.mode); err != nil {
					t.Fatal(err)
				}
			}
			k, err := LoadKeyFile(path)
			if tt.wantKind == "" {
				if err != nil {
					t.Fatalf("LoadKeyFile: %v", err)
				}
				if k.ID() != KeyID(key) {
					t.Errorf("key ID = %s, want %s", k.ID(), KeyID(key))
				}
				return
			}
			if err == nil {
				t.Fatalf("LoadKeyFile succeeded, want an error of kind %q", tt.wantKind)
			}
			msg := err.Error()
			if !errors.Is(err, errs.E(tt.wantKind)) {
				t.Errorf("error %q has kind %q, want %q", msg, errs.KindOf(err), tt.wantKind)
			}
			if tt.notFound && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("error %q is not fs.ErrNotExist", msg)
			}
			if !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("error %q does not contain %q", msg, tt.wantMsg)
			}
			if !strings.Contains(msg, path) {
				t.Errorf("error %q does not name the path", msg)
			}
			for _, leak := range []string{secretText, b64, string(key)} {
				if strings.Contains(msg, leak) {
					t.Errorf("error %q contains the file's content", msg)
				}
			}
		})
	}
}

func TestLoadOrCreateRefusesBadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kek")
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKeyFile(path); !errors.Is(err, errs.E(errs.Invalid)) {
		t.Fatalf("LoadOrCreateKeyFile on a malformed file: err = %v, want kind invalid", err)
	}
	data, err := os.ReadFile(path)
	if err != nil || string(data) != "short" {
		t.Fatalf("malformed key file was replaced (content %q, err %v)", data, err)
	}
}

func FuzzOpen(f *testing.F) {
	k := newTestKeyring(f, 1)
	valid, err := k.Seal([]byte("plaintext"), []byte("aad"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid.Version, valid.KeyID, valid.WrappedKey, valid.Nonce, valid.Ciphertext, []byte("aad"))
	f.Add(0, "", []byte(nil), []byte(nil), []byte(nil), []byte(nil))
	f.Add(Version, k.ID(), valid.WrappedKey[:10], valid.Nonce[:3], []byte{}, []byte("aad"))
	f.Add(Version, k.ID(), make([]byte, wrappedKeySize), make([]byte, NonceSize), make([]byte, 16), []byte{})
	f.Fuzz(func(t *testing.T, v int, kid string, dek, nonce, ct, aad []byte) {
		s := Sealed{Version: v, KeyID: kid, WrappedKey: dek, Nonce: nonce, Ciphertext: ct}
		pt, err := k.Open(s, aad)
		if err != nil {
			if pt != nil {
				t.Errorf("Open returned plaintext with an error")
			}
			if errs.KindOf(err) != errs.Invalid {
				t.Errorf("Open error %q has kind %q, want invalid", err, errs.KindOf(err))
			}
			return
		}
		// The only value ever sealed with this key (in any fuzzing process)
		// is "plaintext" with aad "aad"; anything else opening is a forgery.
		if string(pt) != "plaintext" || string(aad) != "aad" || v != Version || kid != k.ID() {
			t.Errorf("Open accepted a forged Sealed value")
		}
	})
}
