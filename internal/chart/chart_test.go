package chart

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/atoll-edge/atoll/internal/errs"
)

func TestDefaultLimits(t *testing.T) {
	got := DefaultLimits()
	want := Limits{MaxCompressed: 16 << 20, MaxUncompressed: 64 << 20, MaxFiles: 2000, MaxFileSize: 8 << 20}
	if got != want {
		t.Fatalf("DefaultLimits() = %+v, want %+v", got, want)
	}
	if z := (Limits{}).withDefaults(); z != want {
		t.Fatalf("zero Limits with defaults = %+v, want %+v", z, want)
	}
	partial := Limits{MaxFiles: 3}.withDefaults()
	if partial.MaxFiles != 3 || partial.MaxFileSize != want.MaxFileSize {
		t.Fatalf("Limits{MaxFiles: 3} with defaults = %+v, want MaxFiles 3 and the other defaults", partial)
	}
}

func TestCheckChartAccepts(t *testing.T) {
	childTGZ := chartTGZ(t, "child")
	tests := []struct {
		name        string
		archive     func(t *testing.T) []byte
		wantName    string
		wantVersion string
		wantAPI     string
		wantDeps    []string
		wantValues  map[string]any
	}{
		{
			name:        "v2 chart from testdata",
			archive:     func(t *testing.T) []byte { return chartTGZ(t, "simple") },
			wantName:    "simple",
			wantVersion: "0.1.0",
			wantAPI:     "v2",
			wantValues:  map[string]any{"greeting": "hello"},
		},
		{
			name:        "legacy chart without apiVersion is v1",
			archive:     func(t *testing.T) []byte { return chartTGZ(t, "legacy") },
			wantName:    "legacy",
			wantVersion: "1.2.3",
			wantAPI:     "v1",
		},
		{
			name:        "subchart as a directory",
			archive:     func(t *testing.T) []byte { return chartTGZ(t, "parent") },
			wantName:    "parent",
			wantVersion: "2.0.0",
			wantAPI:     "v2",
			wantDeps:    []string{"child"},
		},
		{
			name: "subchart as an archive under charts/",
			archive: func(t *testing.T) []byte {
				entries := []entry{}
				for _, e := range dirEntries(t, "testdata/charts/parent", "parent/") {
					if !strings.HasPrefix(e.hdr.Name, "parent/charts/") {
						entries = append(entries, e)
					}
				}
				entries = append(entries, regBytes("parent/charts/child-0.1.0.tgz", childTGZ))
				return tgz(t, entries...)
			},
			wantName:    "parent",
			wantVersion: "2.0.0",
			wantAPI:     "v2",
			wantDeps:    []string{"child"},
		},
		{
			name: "entries with ./ prefix and a pax global header",
			archive: func(t *testing.T) []byte {
				return tgz(t,
					entry{hdr: tar.Header{Name: "pax_global_header", Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"comment": "git"}}},
					dirEntry("./"),
					dirEntry("./demo/"),
					reg("./demo/Chart.yaml", demoChartYAML),
					reg("./demo//templates/cm.yaml", demoTemplate))
			},
			wantName:    "demo",
			wantVersion: "0.1.0",
			wantAPI:     "v2",
		},
		{
			name: "UTF-8 byte order mark is stripped as Helm does",
			archive: func(t *testing.T) []byte {
				return tgz(t, reg("demo/Chart.yaml", "\xEF\xBB\xBF"+demoChartYAML), reg("demo/values.yaml", "\xEF\xBB\xBFa: b\n"))
			},
			wantName:    "demo",
			wantVersion: "0.1.0",
			wantAPI:     "v2",
			wantValues:  map[string]any{"a": "b"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := tt.archive(t)
			c, err := CheckChart(data, DefaultLimits())
			if err != nil {
				t.Fatalf("CheckChart: %v", err)
			}
			if c.Name() != tt.wantName || c.Version() != tt.wantVersion {
				t.Errorf("name, version = %q, %q; want %q, %q", c.Name(), c.Version(), tt.wantName, tt.wantVersion)
			}
			if got := c.Loaded().Metadata.APIVersion; got != tt.wantAPI {
				t.Errorf("apiVersion = %q, want %q", got, tt.wantAPI)
			}
			var deps []string
			for _, d := range c.Loaded().Dependencies() {
				deps = append(deps, d.Name())
			}
			if strings.Join(deps, ",") != strings.Join(tt.wantDeps, ",") {
				t.Errorf("dependencies = %v, want %v", deps, tt.wantDeps)
			}
			for k, v := range tt.wantValues {
				if got := c.Loaded().Values[k]; got != v {
					t.Errorf("values[%q] = %v, want %v", k, got, v)
				}
			}
			sum := sha256.Sum256(data)
			if want := "sha256:" + hex.EncodeToString(sum[:]); c.Digest != want {
				t.Errorf("Digest = %q, want %q", c.Digest, want)
			}
			if len(c.Loaded().Raw) == 0 {
				t.Errorf("Loaded().Raw is empty; render needs the raw files")
			}
		})
	}
}

func TestCheckChartRefuses(t *testing.T) {
	chartYAML := reg("demo/Chart.yaml", demoChartYAML)
	zeros := func(n int) []byte { return make([]byte, n) }
	small := Limits{MaxCompressed: 1 << 20, MaxUncompressed: 80, MaxFiles: 4, MaxFileSize: 60}
	badSubchart := tgz(t, reg("evil/Chart.yaml", "apiVersion: v2\nname: evil\nversion: 1.0.0\n"), reg("evil/../../../etc/cron.d/x", "boom"))

	tests := []struct {
		name     string
		data     func(t *testing.T) []byte
		lim      Limits
		wantKind errs.Kind
		wantMsg  string // a substring of the error message
	}{
		{
			name:     "empty upload",
			data:     func(*testing.T) []byte { return nil },
			wantKind: errs.Malformed,
			wantMsg:  "chart archive is not a gzip-compressed tar archive",
		},
		{
			name:     "not gzip",
			data:     func(*testing.T) []byte { return []byte("apiVersion: v2\nname: demo\n") },
			wantKind: errs.Malformed,
			wantMsg:  "chart archive is not a gzip-compressed tar archive",
		},
		{
			name:     "gzip but not tar",
			data:     func(t *testing.T) []byte { return gzipOf(t, bytes.Repeat([]byte("not a tar header "), 64)) },
			wantKind: errs.Malformed,
			wantMsg:  "chart archive is gzip-compressed but not a tar archive",
		},
		{
			name:     "gzip but short garbage",
			data:     func(t *testing.T) []byte { return gzipOf(t, []byte("hello")) },
			wantKind: errs.Malformed,
			wantMsg:  "chart archive is corrupt or truncated",
		},
		{
			name: "truncated archive",
			data: func(t *testing.T) []byte {
				rng := rand.New(rand.NewPCG(1, 2))
				noise := make([]byte, 8000)
				for i := range noise {
					noise[i] = byte(rng.Uint32())
				}
				full := tgz(t, chartYAML, regBytes("demo/files/noise.bin", noise))
				return full[:len(full)-2000]
			},
			wantKind: errs.Malformed,
			wantMsg:  "chart archive is corrupt",
		},
		{
			name:     "tar without files",
			data:     func(t *testing.T) []byte { return tgz(t, dirEntry("demo/")) },
			wantKind: errs.Malformed,
			wantMsg:  "chart archive has no files",
		},
		{
			name:     "compressed size over the cap",
			data:     func(t *testing.T) []byte { return tgz(t, chartYAML) },
			lim:      Limits{MaxCompressed: 10},
			wantKind: errs.TooLarge,
			wantMsg:  "more than the 10 allowed",
		},
		{
			name:     "one file over the per-file cap",
			data:     func(t *testing.T) []byte { return tgz(t, chartYAML, regBytes("demo/big.bin", zeros(61))) },
			lim:      small,
			wantKind: errs.TooLarge,
			wantMsg:  `chart archive entry "demo/big.bin" is larger than the 60 bytes allowed for one file`,
		},
		{
			name: "files together over the uncompressed cap",
			data: func(t *testing.T) []byte {
				return tgz(t, chartYAML, regBytes("demo/a.bin", zeros(50)))
			},
			lim:      small,
			wantKind: errs.TooLarge,
			wantMsg:  "chart archive expands to more than the 80 bytes allowed",
		},
		{
			name: "zip bomb under default limits",
			data: func(t *testing.T) []byte {
				entries := []entry{chartYAML}
				for i := range 10 {
					entries = append(entries, regBytes("demo/files/"+string(rune('a'+i))+".bin", zeros(7<<20)))
				}
				return tgz(t, entries...)
			},
			wantKind: errs.TooLarge,
			wantMsg:  "chart archive expands to more than the 67108864 bytes allowed",
		},
		{
			name: "too many entries",
			data: func(t *testing.T) []byte {
				return tgz(t, dirEntry("demo/"), chartYAML, reg("demo/a", ""), reg("demo/b", ""), reg("demo/c", ""))
			},
			lim:      small,
			wantKind: errs.TooLarge,
			wantMsg:  "chart archive has more than 4 entries",
		},
		{
			name:     "absolute path",
			data:     func(t *testing.T) []byte { return tgz(t, chartYAML, reg("/etc/passwd", "root")) },
			wantKind: errs.Malformed,
			wantMsg:  `chart archive entry "/etc/passwd" has an absolute path`,
		},
		{
			name:     "windows drive path",
			data:     func(t *testing.T) []byte { return tgz(t, chartYAML, reg("c:/windows/x", "x")) },
			wantKind: errs.Malformed,
			wantMsg:  `chart archive entry "c:/windows/x" has an absolute path`,
		},
		{
			name:     "dot-dot at the start",
			data:     func(t *testing.T) []byte { return tgz(t, chartYAML, reg("../etc/passwd", "root")) },
			wantKind: errs.Malformed,
			wantMsg:  `chart archive entry "../etc/passwd" escapes the chart directory`,
		},
		{
			name:     "dot-dot in the middle",
			data:     func(t *testing.T) []byte { return tgz(t, chartYAML, reg("demo/templates/../../../x", "x")) },
			wantKind: errs.Malformed,
			wantMsg:  `chart archive entry "demo/templates/../../../x" escapes the chart directory`,
		},
		{
			name:     "dot-dot that cleans back inside is refused too",
			data:     func(t *testing.T) []byte { return tgz(t, chartYAML, reg("demo/templates/../values.yaml", "a: 1")) },
			wantKind: errs.Malformed,
			wantMsg:  "escapes the chart directory",
		},
		{
			name:     "dot-dot directory",
			data:     func(t *testing.T) []byte { return tgz(t, dirEntry("demo/../"), chartYAML) },
			wantKind: errs.Malformed,
			wantMsg:  `chart archive entry "demo/../" escapes the chart directory`,
		},
		{
			name:     "backslash",
			data:     func(t *testing.T) []byte { return tgz(t, chartYAML, reg(`demo\..\..\x`, "x")) },
			wantKind: errs.Malformed,
			wantMsg:  "contains a backslash",
		},
		{
			name: "symlink",
			data: func(t *testing.T) []byte {
				return tgz(t, chartYAML, special("demo/values.yaml", tar.TypeSymlink, "/etc/shadow"))
			},
			wantKind: errs.Malformed,
			wantMsg:  `chart archive entry "demo/values.yaml" is a symbolic link; only regular files and directories are allowed`,
		},
		{
			name: "hard link",
			data: func(t *testing.T) []byte {
				return tgz(t, chartYAML, special("demo/values.yaml", tar.TypeLink, "demo/Chart.yaml"))
			},
			wantKind: errs.Malformed,
			wantMsg:  `chart archive entry "demo/values.yaml" is a hard link`,
		},
		{
			name:     "character device",
			data:     func(t *testing.T) []byte { return tgz(t, chartYAML, special("demo/null", tar.TypeChar, "")) },
			wantKind: errs.Malformed,
			wantMsg:  `chart archive entry "demo/null" is a character device`,
		},
		{
			name:     "block device",
			data:     func(t *testing.T) []byte { return tgz(t, chartYAML, special("demo/sda", tar.TypeBlock, "")) },
			wantKind: errs.Malformed,
			wantMsg:  `chart archive entry "demo/sda" is a block device`,
		},
		{
			name:     "fifo",
			data:     func(t *testing.T) []byte { return tgz(t, chartYAML, special("demo/pipe", tar.TypeFifo, "")) },
			wantKind: errs.Malformed,
			wantMsg:  `chart archive entry "demo/pipe" is a named pipe (fifo)`,
		},
		{
			name:     "file at the root of the archive",
			data:     func(t *testing.T) []byte { return tgz(t, reg("Chart.yaml", demoChartYAML)) },
			wantKind: errs.Malformed,
			wantMsg:  `chart archive entry "Chart.yaml" is not inside the chart's directory`,
		},
		{
			name:     "two top-level directories",
			data:     func(t *testing.T) []byte { return tgz(t, chartYAML, reg("other/values.yaml", "a: 1")) },
			wantKind: errs.Malformed,
			wantMsg:  `chart archive entry "other/values.yaml" is outside the chart directory "demo/"`,
		},
		{
			name: "same file twice",
			data: func(t *testing.T) []byte {
				return tgz(t, chartYAML, reg("demo/values.yaml", "a: 1"), reg("./demo/values.yaml", "a: 2"))
			},
			wantKind: errs.Malformed,
			wantMsg:  `chart archive entry "./demo/values.yaml" appears more than once`,
		},
		{
			name:     "no Chart.yaml",
			data:     func(t *testing.T) []byte { return tgz(t, reg("demo/values.yaml", "a: 1")) },
			wantKind: errs.Malformed,
			wantMsg:  "chart cannot be loaded: Chart.yaml file is missing",
		},
		{
			name:     "Chart.yaml is not YAML",
			data:     func(t *testing.T) []byte { return tgz(t, reg("demo/Chart.yaml", "name: [demo\n")) },
			wantKind: errs.Malformed,
			wantMsg:  "chart cannot be loaded: cannot load Chart.yaml",
		},
		{
			name:     "values.yaml is not YAML",
			data:     func(t *testing.T) []byte { return tgz(t, chartYAML, reg("demo/values.yaml", "a: [1\n")) },
			wantKind: errs.Malformed,
			wantMsg:  "cannot load values.yaml",
		},
		{
			name:     "name missing",
			data:     func(t *testing.T) []byte { return tgz(t, reg("demo/Chart.yaml", "apiVersion: v2\nversion: 0.1.0\n")) },
			wantKind: errs.Invalid,
			wantMsg:  "chart is not valid: validation: chart.metadata.name is required",
		},
		{
			name:     "version missing",
			data:     func(t *testing.T) []byte { return tgz(t, reg("demo/Chart.yaml", "apiVersion: v2\nname: demo\n")) },
			wantKind: errs.Invalid,
			wantMsg:  "validation: chart.metadata.version is required",
		},
		{
			name: "version not semver",
			data: func(t *testing.T) []byte {
				return tgz(t, reg("demo/Chart.yaml", "apiVersion: v2\nname: demo\nversion: banana\n"))
			},
			wantKind: errs.Invalid,
			wantMsg:  `validation: chart.metadata.version "banana" is invalid`,
		},
		{
			name: "unknown apiVersion",
			data: func(t *testing.T) []byte {
				return tgz(t, reg("demo/Chart.yaml", "apiVersion: v3\nname: demo\nversion: 0.1.0\n"))
			},
			wantKind: errs.Invalid,
			wantMsg:  `chart "demo" has apiVersion "v3"`,
		},
		{
			name:     "library chart",
			data:     func(t *testing.T) []byte { return tgz(t, reg("demo/Chart.yaml", demoChartYAML+"type: library\n")) },
			wantKind: errs.Invalid,
			wantMsg:  "library charts are not installable",
		},
		{
			name: "dependency missing from charts/",
			data: func(t *testing.T) []byte {
				return tgz(t, reg("demo/Chart.yaml", demoChartYAML+"dependencies:\n  - name: db\n    version: 1.0.0\n"))
			},
			wantKind: errs.Invalid,
			wantMsg:  "found in Chart.yaml, but missing in charts/ directory: db",
		},
		{
			name: "subchart archive escaping its directory",
			data: func(t *testing.T) []byte {
				return tgz(t, chartYAML, regBytes("demo/charts/evil-1.0.0.tgz", badSubchart))
			},
			wantKind: errs.Malformed,
			wantMsg:  `subchart archive "demo/charts/evil-1.0.0.tgz" entry "evil/../../../etc/cron.d/x" escapes the chart directory`,
		},
		{
			name:     "subchart archive that is not an archive",
			data:     func(t *testing.T) []byte { return tgz(t, chartYAML, reg("demo/charts/db-1.0.0.tgz", "nope")) },
			wantKind: errs.Malformed,
			wantMsg:  `subchart archive "demo/charts/db-1.0.0.tgz" is not a gzip-compressed tar archive`,
		},
		{
			name: "subchart archive counted in the uncompressed budget",
			data: func(t *testing.T) []byte {
				sub := tgz(t, reg("db/Chart.yaml", "apiVersion: v2\nname: db\nversion: 1.0.0\n"), regBytes("db/big.bin", zeros(50)))
				return tgz(t, chartYAML, regBytes("demo/charts/db-1.0.0.tgz", sub))
			},
			lim:      Limits{MaxUncompressed: 150 + 50},
			wantKind: errs.TooLarge,
			wantMsg:  "expands to more than the 200 bytes allowed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := CheckChart(tt.data(t), tt.lim)
			if err == nil {
				t.Fatalf("CheckChart accepted the archive (chart %q); want a %s error containing %q", c.Name(), tt.wantKind, tt.wantMsg)
			}
			if c != nil {
				t.Errorf("CheckChart returned a chart with its error")
			}
			if got := errs.KindOf(err); got != tt.wantKind {
				t.Errorf("kind = %q, want %q (error: %v)", got, tt.wantKind, err)
			}
			if !errors.Is(err, errs.E(tt.wantKind)) {
				t.Errorf("errors.Is(err, errs.E(%q)) = false", tt.wantKind)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error = %q, want it to contain %q", err, tt.wantMsg)
			}
		})
	}
}
