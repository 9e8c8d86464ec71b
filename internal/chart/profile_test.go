package chart

import (
	"archive/tar"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/atoll-edge/atoll/internal/errs"
)

func TestCheckProfileAccepts(t *testing.T) {
	basicFiles := []ProfileFile{{
		Path:      "config.yaml",
		ChartPath: "simple/templates/config.yaml",
		Data:      []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-profile-config\ndata:\n  from: profile\n"),
	}}
	basicValues := map[string]any{"greeting": "hola", "nested": map[string]any{"a": float64(1)}}

	tests := []struct {
		name       string
		archive    func(t *testing.T) []byte
		wantValues map[string]any
		wantFiles  []ProfileFile
	}{
		{
			name:       "testdata profile at the archive root",
			archive:    func(t *testing.T) []byte { return tgz(t, dirEntries(t, "testdata/profiles/basic", "")...) },
			wantValues: basicValues,
			wantFiles:  basicFiles,
		},
		{
			name:       "testdata profile inside one top-level directory",
			archive:    func(t *testing.T) []byte { return tgz(t, dirEntries(t, "testdata/profiles/basic", "basic/")...) },
			wantValues: basicValues,
			wantFiles:  basicFiles,
		},
		{
			name: "manifest without values or files",
			archive: func(t *testing.T) []byte {
				return tgz(t, reg("manifest.yaml", "version: v1\n"))
			},
			wantValues: map[string]any{},
		},
		{
			name: "empty manifest",
			archive: func(t *testing.T) []byte {
				return tgz(t, reg("./manifest.yaml", ""))
			},
			wantValues: map[string]any{},
		},
		{
			name: "values in several YAML documents are merged as Helm merges them",
			archive: func(t *testing.T) []byte {
				return tgz(t,
					reg("manifest.yaml", "version: v1\ntype:\n  values: v.yaml\n"),
					reg("v.yaml", "a: 1\nm:\n  x: 1\n---\nb: 2\nm:\n  z: 2\n"))
			},
			wantValues: map[string]any{"a": float64(1), "b": float64(2), "m": map[string]any{"x": float64(1), "z": float64(2)}},
		},
		{
			name: "paths in the manifest are cleaned",
			archive: func(t *testing.T) []byte {
				return tgz(t,
					reg("manifest.yaml", "type:\n  configresource:\n    - filepath: ./files//a.yaml\n      chartpath: ./web/templates/a.yaml\n"),
					reg("files/a.yaml", "a"))
			},
			wantValues: map[string]any{},
			wantFiles:  []ProfileFile{{Path: "files/a.yaml", ChartPath: "web/templates/a.yaml", Data: []byte("a")}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := CheckProfile(tt.archive(t), DefaultLimits())
			if err != nil {
				t.Fatalf("CheckProfile: %v", err)
			}
			if !reflect.DeepEqual(p.Values(), tt.wantValues) {
				t.Errorf("Values() = %#v, want %#v", p.Values(), tt.wantValues)
			}
			if got := p.Files(); !reflect.DeepEqual(got, tt.wantFiles) {
				t.Errorf("Files() = %+v, want %+v", got, tt.wantFiles)
			}
			if !strings.HasPrefix(p.Digest, "sha256:") || len(p.Digest) != len("sha256:")+64 {
				t.Errorf("Digest = %q, want sha256:<64 hex>", p.Digest)
			}
		})
	}
}

func TestCheckProfileRefuses(t *testing.T) {
	manifest := func(body string) entry { return reg("manifest.yaml", body) }
	const withFile = "version: v1\ntype:\n  configresource:\n    - filepath: %s\n      chartpath: %s\n"
	fileManifest := func(fp, cp string) entry {
		return manifest(fmt.Sprintf(withFile, fp, cp))
	}

	tests := []struct {
		name     string
		data     func(t *testing.T) []byte
		lim      Limits
		wantKind errs.Kind
		wantMsg  string
	}{
		{
			name:     "not gzip",
			data:     func(*testing.T) []byte { return []byte("version: v1\n") },
			wantKind: errs.Malformed,
			wantMsg:  "profile archive is not a gzip-compressed tar archive",
		},
		{
			name:     "over the compressed cap",
			data:     func(t *testing.T) []byte { return tgz(t, manifest("version: v1\n")) },
			lim:      Limits{MaxCompressed: 8},
			wantKind: errs.TooLarge,
			wantMsg:  "profile archive is",
		},
		{
			name: "over the per-file cap",
			data: func(t *testing.T) []byte {
				return tgz(t, manifest("version: v1\n"), regBytes("big", make([]byte, 100)))
			},
			lim:      Limits{MaxFileSize: 99},
			wantKind: errs.TooLarge,
			wantMsg:  `profile archive entry "big" is larger than the 99 bytes allowed for one file`,
		},
		{
			name:     "entry escaping the profile",
			data:     func(t *testing.T) []byte { return tgz(t, manifest("version: v1\n"), reg("../../etc/passwd", "x")) },
			wantKind: errs.Malformed,
			wantMsg:  `profile archive entry "../../etc/passwd" escapes the profile directory`,
		},
		{
			name:     "symlink",
			data:     func(t *testing.T) []byte { return tgz(t, special("manifest.yaml", tar.TypeSymlink, "/etc/passwd")) },
			wantKind: errs.Malformed,
			wantMsg:  `profile archive entry "manifest.yaml" is a symbolic link`,
		},
		{
			name:     "no manifest",
			data:     func(t *testing.T) []byte { return tgz(t, reg("override_values.yaml", "a: 1\n")) },
			wantKind: errs.Malformed,
			wantMsg:  "profile archive has no manifest.yaml at its root",
		},
		{
			name:     "manifest two directories down",
			data:     func(t *testing.T) []byte { return tgz(t, reg("a/b/manifest.yaml", "version: v1\n")) },
			wantKind: errs.Malformed,
			wantMsg:  "profile archive has no manifest.yaml at its root",
		},
		{
			name:     "manifest is not YAML",
			data:     func(t *testing.T) []byte { return tgz(t, manifest("version: [v1\n")) },
			wantKind: errs.Malformed,
			wantMsg:  `profile manifest "manifest.yaml" is not valid YAML`,
		},
		{
			name:     "manifest of the wrong shape",
			data:     func(t *testing.T) []byte { return tgz(t, manifest("type: values\n")) },
			wantKind: errs.Malformed,
			wantMsg:  `profile manifest "manifest.yaml" is not valid YAML`,
		},
		{
			name:     "unknown manifest version",
			data:     func(t *testing.T) []byte { return tgz(t, manifest("version: v9\n")) },
			wantKind: errs.Invalid,
			wantMsg:  `profile manifest "manifest.yaml" has version "v9"; only v1 is supported`,
		},
		{
			name:     "values file missing",
			data:     func(t *testing.T) []byte { return tgz(t, manifest("type:\n  values: override_values.yaml\n")) },
			wantKind: errs.Malformed,
			wantMsg:  `profile manifest "manifest.yaml" names values file "override_values.yaml", which is not in the archive`,
		},
		{
			name: "values file is not YAML",
			data: func(t *testing.T) []byte {
				return tgz(t, manifest("type:\n  values: override_values.yaml\n"), reg("override_values.yaml", "a: [1\n"))
			},
			wantKind: errs.Malformed,
			wantMsg:  `profile values file "override_values.yaml" is not valid YAML`,
		},
		{
			name:     "values path escaping the profile",
			data:     func(t *testing.T) []byte { return tgz(t, manifest("type:\n  values: ../v.yaml\n")) },
			wantKind: errs.Malformed,
			wantMsg:  `values "../v.yaml" escapes the profile directory`,
		},
		{
			name:     "extra file missing",
			data:     func(t *testing.T) []byte { return tgz(t, fileManifest("config.yaml", "web/templates/config.yaml")) },
			wantKind: errs.Malformed,
			wantMsg:  `profile manifest "manifest.yaml" names file "config.yaml", which is not in the archive`,
		},
		{
			name:     "empty filepath",
			data:     func(t *testing.T) []byte { return tgz(t, fileManifest(`""`, "web/templates/config.yaml")) },
			wantKind: errs.Malformed,
			wantMsg:  `profile manifest "manifest.yaml" has an empty filepath`,
		},
		{
			name: "chartpath escaping the chart",
			data: func(t *testing.T) []byte {
				return tgz(t, fileManifest("config.yaml", "web/../../etc/passwd"), reg("config.yaml", "x"))
			},
			wantKind: errs.Malformed,
			wantMsg:  `chartpath "web/../../etc/passwd" escapes the chart directory`,
		},
		{
			name: "absolute chartpath",
			data: func(t *testing.T) []byte {
				return tgz(t, fileManifest("config.yaml", "/etc/passwd"), reg("config.yaml", "x"))
			},
			wantKind: errs.Malformed,
			wantMsg:  `chartpath "/etc/passwd" is an absolute path`,
		},
		{
			name: "chartpath without the chart directory",
			data: func(t *testing.T) []byte {
				return tgz(t, fileManifest("config.yaml", "config.yaml"), reg("config.yaml", "x"))
			},
			wantKind: errs.Malformed,
			wantMsg:  `chartpath "config.yaml" must start with the chart's directory`,
		},
		{
			name: "chartpath named twice",
			data: func(t *testing.T) []byte {
				return tgz(t,
					manifest("type:\n  configresource:\n    - filepath: a\n      chartpath: web/templates/x.yaml\n    - filepath: b\n      chartpath: web/templates/./x.yaml\n"),
					reg("a", "a"), reg("b", "b"))
			},
			wantKind: errs.Malformed,
			wantMsg:  `chartpath "web/templates/./x.yaml" is named more than once`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := CheckProfile(tt.data(t), tt.lim)
			if err == nil {
				t.Fatalf("CheckProfile accepted the archive (%d files); want a %s error containing %q", len(p.Files()), tt.wantKind, tt.wantMsg)
			}
			if p != nil {
				t.Errorf("CheckProfile returned a profile with its error")
			}
			if got := errs.KindOf(err); got != tt.wantKind {
				t.Errorf("kind = %q, want %q (error: %v)", got, tt.wantKind, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error = %q, want it to contain %q", err, tt.wantMsg)
			}
		})
	}
}
