package chart

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// entry is one tar entry written by tgz.
type entry struct {
	hdr  tar.Header
	body []byte
}

var modTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// reg is a regular file entry.
func reg(name, body string) entry {
	return entry{
		hdr:  tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body)), ModTime: modTime},
		body: []byte(body),
	}
}

// regBytes is a regular file entry with binary content.
func regBytes(name string, body []byte) entry {
	e := reg(name, "")
	e.hdr.Size = int64(len(body))
	e.body = body
	return e
}

// dirEntry is a directory entry.
func dirEntry(name string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: modTime}}
}

// special is an entry of type typ (a link, a device, a fifo) without content.
func special(name string, typ byte, linkname string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: typ, Linkname: linkname, Mode: 0o644, ModTime: modTime, Devmajor: 1, Devminor: 3}}
}

// tgz writes entries as a gzip-compressed tar archive.
func tgz(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		hdr := e.hdr
		if err := tw.WriteHeader(&hdr); err != nil {
			t.Fatalf("write tar header %q: %v", hdr.Name, err)
		}
		if len(e.body) > 0 {
			if _, err := tw.Write(e.body); err != nil {
				t.Fatalf("write tar entry %q: %v", hdr.Name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// gzipOf compresses data without a tar inside.
func gzipOf(t testing.TB, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// dirEntries returns the entries of the directory tree at dir, named under
// prefix ("simple/" puts testdata/charts/simple/Chart.yaml at simple/Chart.yaml).
func dirEntries(t testing.TB, dir, prefix string) []entry {
	t.Helper()
	var out []entry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		name := prefix + filepath.ToSlash(rel)
		if rel == "." {
			name = prefix
		}
		if d.IsDir() {
			if name != "" {
				out = append(out, dirEntry(strings.TrimSuffix(name, "/")+"/"))
			}
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out = append(out, regBytes(name, data))
		return nil
	})
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	return out
}

// chartTGZ archives testdata/charts/<name> as `helm package` would: under the
// directory <name>/.
func chartTGZ(t testing.TB, name string, extra ...entry) []byte {
	t.Helper()
	return tgz(t, append(dirEntries(t, filepath.Join("testdata", "charts", name), name+"/"), extra...)...)
}

const demoChartYAML = "apiVersion: v2\nname: demo\nversion: 0.1.0\n"

const demoTemplate = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\n"
