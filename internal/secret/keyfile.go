package secret

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/atoll-edge/atoll/internal/errs"
)

// maxKeyFileSize bounds what LoadKeyFile reads: a key file holds 32 raw bytes
// or 44 characters of base64 and a little whitespace, nothing near this.
const maxKeyFileSize = 4096

// LoadKeyFile reads the key-encryption key from the file at path and returns
// a Keyring for it. The file must hold exactly 32 raw bytes, or the standard
// base64 encoding of 32 bytes (surrounding whitespace is ignored), and must
// not be accessible by group or others. Errors name the path, never the
// content; a missing file gives an error for which
// errors.Is(err, fs.ErrNotExist) is true.
func LoadKeyFile(path string) (*Keyring, error) {
	key, err := readKeyFile(path)
	if err != nil {
		return nil, err
	}
	defer clear(key)
	return NewKeyring(key)
}

// LoadOrCreateKeyFile is like LoadKeyFile, but if the file does not exist it
// first creates it, and its parent directory (mode 0700) if needed, with a
// fresh random key written as base64 and a newline, mode 0600. The file
// appears atomically, complete or not at all; if another process creates it
// at the same time, the key that process wrote is used.
func LoadOrCreateKeyFile(path string) (*Keyring, error) {
	k, err := LoadKeyFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	return createKeyFile(path)
}

func readKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errs.Wrap(errs.NotFound, err, "key file %s does not exist; create it with `head -c 32 /dev/urandom | base64 > %s && chmod 600 %s`", path, path, path)
		}
		return nil, fmt.Errorf("open key file %s: %w", path, err)
	}
	defer f.Close()

	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat key file %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, errs.New(errs.Invalid, "key file %s is not a regular file; give the path of the file that holds the key", path)
	}
	// Windows reports made-up permission bits, so the check means nothing there.
	if perm := fi.Mode().Perm(); perm&0o077 != 0 && runtime.GOOS != "windows" {
		return nil, errs.New(errs.Invalid, "key file %s is accessible by group or others (mode %#o); run `chmod 600 %s`", path, perm, path)
	}

	data, err := io.ReadAll(io.LimitReader(f, maxKeyFileSize+1))
	defer clear(data)
	if err != nil {
		return nil, fmt.Errorf("read key file %s: %w", path, err)
	}
	if len(data) > maxKeyFileSize {
		return nil, errs.New(errs.Invalid, "key file %s is larger than %d bytes, so it is not a key file; check the path", path, maxKeyFileSize)
	}
	return parseKey(path, data)
}

// parseKey returns a copy of the key held in data, the content of the key
// file at path.
func parseKey(path string, data []byte) ([]byte, error) {
	if len(data) == KeySize {
		return bytes.Clone(data), nil
	}
	text := bytes.TrimSpace(data)
	if len(text) == 0 {
		return nil, errs.New(errs.Invalid, "key file %s is empty; write a %d-byte random key to it, raw or base64-encoded, or remove it to have one created", path, KeySize)
	}
	buf := make([]byte, base64.StdEncoding.DecodedLen(len(text)))
	n, err := base64.StdEncoding.Decode(buf, text)
	if err != nil {
		clear(buf)
		// The decoder's error gives an offset into the key; leave it out.
		return nil, errs.New(errs.Invalid, "key file %s holds neither %d raw bytes nor base64 text; write a %d-byte random key to it, raw or base64-encoded", path, KeySize, KeySize)
	}
	if n != KeySize {
		clear(buf)
		return nil, errs.New(errs.Invalid, "key file %s holds a base64-encoded key of %d bytes, but the key must be %d bytes", path, n, KeySize)
	}
	return buf[:n], nil
}

func createKeyFile(path string) (*Keyring, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create directory for key file %s: %w", path, err)
	}

	key := make([]byte, KeySize)
	defer clear(key)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate key for key file %s: %w", path, err)
	}
	text := make([]byte, base64.StdEncoding.EncodedLen(KeySize)+1)
	defer clear(text)
	base64.StdEncoding.Encode(text, key)
	text[len(text)-1] = '\n'

	// os.CreateTemp makes the file with mode 0600.
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("create temporary file for key file %s: %w", path, err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // after a successful link, only the extra name goes
	if _, err := tmp.Write(text); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write temporary file for key file %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("sync temporary file for key file %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("close temporary file for key file %s: %w", path, err)
	}

	// A hard link, unlike a rename, never replaces a key file that another
	// process created meanwhile, whose key may already be in use.
	if err := os.Link(tmpName, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return LoadKeyFile(path)
		}
		// The file system may not support hard links.
		if err := os.Rename(tmpName, path); err != nil {
			return nil, fmt.Errorf("install key file %s: %w", path, err)
		}
	}
	syncDir(dir)
	return NewKeyring(key)
}

// syncDir makes a new directory entry durable. It is best effort: some file
// systems do not support syncing a directory, and the file is complete anyway.
func syncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	_ = d.Close()
}
