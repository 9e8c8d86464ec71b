package chart

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/atoll-edge/atoll/internal/errs"
)

// The default limits of an uploaded archive.
const (
	DefaultMaxCompressed   = 16 << 20 // 16 MiB
	DefaultMaxUncompressed = 64 << 20 // 64 MiB
	DefaultMaxFiles        = 2000
	DefaultMaxFileSize     = 8 << 20 // 8 MiB
)

// Limits caps what an uploaded archive may hold. A zero (or negative) field
// means the default of that field.
type Limits struct {
	// MaxCompressed caps the size of the archive as uploaded, in bytes.
	MaxCompressed int64
	// MaxUncompressed caps the sum of the sizes of all the files in the archive
	// (those of nested subchart archives included), in bytes.
	MaxUncompressed int64
	// MaxFiles caps the number of entries (files and directories) of the archive,
	// nested subchart archives included.
	MaxFiles int
	// MaxFileSize caps the size of one file of the archive, in bytes.
	MaxFileSize int64
}

// DefaultLimits returns the limits Atoll applies unless told otherwise:
// 16 MiB compressed, 64 MiB uncompressed, 2000 entries, 8 MiB per file.
func DefaultLimits() Limits {
	return Limits{
		MaxCompressed:   DefaultMaxCompressed,
		MaxUncompressed: DefaultMaxUncompressed,
		MaxFiles:        DefaultMaxFiles,
		MaxFileSize:     DefaultMaxFileSize,
	}
}

// withDefaults returns l with every unset field set to its default.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxCompressed <= 0 {
		l.MaxCompressed = d.MaxCompressed
	}
	if l.MaxUncompressed <= 0 {
		l.MaxUncompressed = d.MaxUncompressed
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = d.MaxFiles
	}
	if l.MaxFileSize <= 0 {
		l.MaxFileSize = d.MaxFileSize
	}
	return l
}

// archiveKind says what an archive is, for messages: "chart archive" with the
// "chart directory", "profile archive" with the "profile directory".
type archiveKind struct {
	what string // "chart archive", `subchart archive "charts/db-1.0.0.tgz"`
	dir  string // "chart", "profile"
}

// budget is what an archive, with the archives nested in it, may still use.
type budget struct {
	lim     Limits
	used    int64 // uncompressed bytes read so far
	entries int   // tar entries seen so far
}

// file is one regular file read out of an archive.
type file struct {
	name string // cleaned, slash-separated path inside the archive
	mod  time.Time
	data []byte
}

// drivePath matches a Windows drive prefix ("c:"), which is absolute too.
var drivePath = regexp.MustCompile(`^[A-Za-z]:`)

// utf8BOM is stripped from the start of every file, as Helm's loader does.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// digest returns "sha256:<hex>" of data.
func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// checkCompressed refuses an archive larger than the compressed cap.
func checkCompressed(k archiveKind, data []byte, lim Limits) error {
	if int64(len(data)) > lim.MaxCompressed {
		return errs.New(errs.TooLarge, "%s is %d bytes, more than the %d allowed", k.what, len(data), lim.MaxCompressed)
	}
	return nil
}

// readArchive reads every regular file of the gzip-compressed tar archive data,
// checking each entry against the rules of the package and b. Directories are
// checked and counted but not returned.
func readArchive(k archiveKind, data []byte, b *budget) ([]file, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, errs.Wrap(errs.Malformed, err, "%s is not a gzip-compressed tar archive", k.what)
	}
	defer zr.Close()

	tr := tar.NewReader(zr)
	var files []file
	seen := map[string]bool{}
	for first := true; ; first = false {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if first && errors.Is(err, tar.ErrHeader) {
				return nil, errs.Wrap(errs.Malformed, err, "%s is gzip-compressed but not a tar archive", k.what)
			}
			return nil, errs.Wrap(errs.Malformed, err, "%s is corrupt or truncated", k.what)
		}
		b.entries++
		if b.entries > b.lim.MaxFiles {
			return nil, errs.New(errs.TooLarge, "%s has more than %d entries", k.what, b.lim.MaxFiles)
		}
		if hd.Typeflag == tar.TypeXGlobalHeader {
			continue // pax global header (git archive writes one): metadata only
		}
		name, err := cleanEntryName(k, hd.Name)
		if err != nil {
			return nil, err
		}
		if err := checkEntryType(k, hd); err != nil {
			return nil, err
		}
		if hd.Typeflag == tar.TypeDir {
			continue
		}
		if name == "." {
			return nil, errs.New(errs.Malformed, "%s entry %q is a file without a name", k.what, hd.Name)
		}
		if seen[name] {
			return nil, errs.New(errs.Malformed, "%s entry %q appears more than once", k.what, hd.Name)
		}
		seen[name] = true

		content, err := readEntry(k, tr, hd, b)
		if err != nil {
			return nil, err
		}
		files = append(files, file{name: name, mod: hd.ModTime, data: bytes.TrimPrefix(content, utf8BOM)})
	}
	if len(files) == 0 {
		return nil, errs.New(errs.Malformed, "%s has no files", k.what)
	}
	return files, nil
}

// readEntry reads the content of the current entry of tr, counting the bytes as
// they come: the sizes in the header are used to fail early, never trusted to
// bound the read.
func readEntry(k archiveKind, tr io.Reader, hd *tar.Header, b *budget) ([]byte, error) {
	remaining := b.lim.MaxUncompressed - b.used
	if hd.Size > b.lim.MaxFileSize {
		return nil, tooLargeFile(k, hd.Name, b.lim)
	}
	if hd.Size > remaining {
		return nil, tooLargeTotal(k, b.lim)
	}
	limit := min(b.lim.MaxFileSize, remaining)
	var buf bytes.Buffer
	buf.Grow(int(max(hd.Size, 0)))
	n, err := io.Copy(&buf, io.LimitReader(tr, limit+1))
	if err != nil {
		return nil, errs.Wrap(errs.Malformed, err, "%s is corrupt or truncated: cannot read entry %q", k.what, hd.Name)
	}
	if n > b.lim.MaxFileSize {
		return nil, tooLargeFile(k, hd.Name, b.lim)
	}
	if n > remaining {
		return nil, tooLargeTotal(k, b.lim)
	}
	b.used += n
	return buf.Bytes(), nil
}

func tooLargeFile(k archiveKind, name string, lim Limits) error {
	return errs.New(errs.TooLarge, "%s entry %q is larger than the %d bytes allowed for one file", k.what, name, lim.MaxFileSize)
}

func tooLargeTotal(k archiveKind, lim Limits) error {
	return errs.New(errs.TooLarge, "%s expands to more than the %d bytes allowed", k.what, lim.MaxUncompressed)
}

// cleanEntryName checks the name of a tar entry and returns it cleaned
// ("./web//Chart.yaml" becomes "web/Chart.yaml"; a directory "./" becomes ".").
func cleanEntryName(k archiveKind, name string) (string, error) {
	switch {
	case name == "":
		return "", errs.New(errs.Malformed, "%s has an entry with an empty name", k.what)
	case strings.ContainsRune(name, '\\'):
		return "", errs.New(errs.Malformed, "%s entry %q contains a backslash; path elements must be separated by /", k.what, name)
	case strings.HasPrefix(name, "/") || drivePath.MatchString(name):
		return "", errs.New(errs.Malformed, "%s entry %q has an absolute path", k.what, name)
	}
	if err := checkRelative(name); err != nil {
		return "", errs.New(errs.Malformed, "%s entry %q escapes the %s directory", k.what, name, k.dir)
	}
	return path.Clean(name), nil
}

// errEscapes is returned by checkRelative for a path with a ".." element.
var errEscapes = errors.New("path has a .. element")

// checkRelative returns errEscapes if any element of the slash-separated path p
// is "..".
func checkRelative(p string) error {
	for el := range strings.SplitSeq(p, "/") {
		if el == ".." {
			return errEscapes
		}
	}
	return nil
}

// checkEntryType refuses every entry but regular files and directories.
func checkEntryType(k archiveKind, hd *tar.Header) error {
	var what string
	switch hd.Typeflag {
	case tar.TypeReg, tar.TypeDir:
		return nil
	case tar.TypeSymlink:
		what = "is a symbolic link"
	case tar.TypeLink:
		what = "is a hard link"
	case tar.TypeChar:
		what = "is a character device"
	case tar.TypeBlock:
		what = "is a block device"
	case tar.TypeFifo:
		what = "is a named pipe (fifo)"
	default:
		what = "has the unsupported tar type " + quoteType(hd.Typeflag)
	}
	return errs.New(errs.Malformed, "%s entry %q %s; only regular files and directories are allowed", k.what, hd.Name, what)
}

func quoteType(t byte) string {
	if t >= 0x20 && t < 0x7f {
		return "'" + string(rune(t)) + "'"
	}
	return "0x" + hex.EncodeToString([]byte{t})
}
