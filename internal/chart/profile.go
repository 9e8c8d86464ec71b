package chart

import (
	"bytes"
	"path"
	"strings"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"sigs.k8s.io/yaml"

	"github.com/atoll-edge/atoll/internal/errs"
)

// ManifestFile is the name of the file that describes an EMCO profile archive.
const ManifestFile = "manifest.yaml"

// Profile is an EMCO profile archive that passed CheckProfile: override values
// for a chart and extra files that replace or add files of the chart.
type Profile struct {
	// Digest is "sha256:<hex>" of the archive as uploaded.
	Digest string

	values map[string]any
	files  []ProfileFile
}

// ProfileFile is a file of a profile archive that replaces or adds a file of the
// chart the profile is for.
type ProfileFile struct {
	// Path is the file's path in the profile archive (manifest filepath).
	Path string
	// ChartPath is where the file goes in the chart archive (manifest chartpath),
	// starting with the chart's directory: "mychart/templates/config.yaml".
	ChartPath string
	// Data is the file's content.
	Data []byte
}

// Values returns the profile's override values (its values file parsed as Helm
// parses a values file), or an empty map if the manifest names none. Callers
// must not modify the map.
func (p *Profile) Values() map[string]any { return p.values }

// Files returns the profile's extra files, in the manifest's order.
func (p *Profile) Files() []ProfileFile { return append([]ProfileFile(nil), p.files...) }

// profileManifest is manifest.yaml of an EMCO (ONAP multicloud-k8s) profile:
//
//	version: v1
//	type:
//	  values: "override_values.yaml"
//	  configresource:
//	    - filepath: config.yaml
//	      chartpath: mychart/templates/config.yaml
type profileManifest struct {
	Version string `json:"version"`
	Type    struct {
		Values         string `json:"values"`
		ConfigResource []struct {
			FilePath  string `json:"filepath"`
			ChartPath string `json:"chartpath"`
		} `json:"configresource"`
	} `json:"type"`
}

// CheckProfile checks data, an EMCO profile archive (.tgz) as uploaded, against
// lim and the rules of the package, and reads it: manifest.yaml, the values file
// it names and the extra files it lists. manifest.yaml is at the root of the
// archive, or inside its only top-level directory; the paths in the manifest are
// relative to the directory that holds it.
//
// Errors are errs.TooLarge (a limit), errs.Malformed (not gzip/tar, an unsafe
// entry, manifest.yaml missing, a file the manifest names missing, bad YAML, an
// unsafe chartpath) or errs.Invalid (an unknown manifest version), each naming
// the file.
func CheckProfile(data []byte, lim Limits) (*Profile, error) {
	lim = lim.withDefaults()
	k := archiveKind{what: "profile archive", dir: "profile"}
	if err := checkCompressed(k, data, lim); err != nil {
		return nil, err
	}
	raw, err := readArchive(k, data, &budget{lim: lim})
	if err != nil {
		return nil, err
	}
	files := make(map[string][]byte, len(raw))
	for _, f := range raw {
		files[f.name] = f.data
	}
	base, err := profileBase(raw, files)
	if err != nil {
		return nil, err
	}
	manifestName := path.Join(base, ManifestFile)

	var m profileManifest
	if err := yaml.Unmarshal(files[manifestName], &m); err != nil {
		return nil, errs.Wrap(errs.Malformed, err, "profile manifest %q is not valid YAML", manifestName)
	}
	if m.Version != "" && m.Version != "v1" {
		return nil, errs.New(errs.Invalid, "profile manifest %q has version %q; only v1 is supported", manifestName, m.Version)
	}

	p := &Profile{Digest: digest(data), values: map[string]any{}}
	if m.Type.Values != "" {
		name, err := manifestPath(manifestName, "values", m.Type.Values)
		if err != nil {
			return nil, err
		}
		content, ok := files[path.Join(base, name)]
		if !ok {
			return nil, errs.New(errs.Malformed, "profile manifest %q names values file %q, which is not in the archive", manifestName, m.Type.Values)
		}
		vals, err := loader.LoadValues(bytes.NewReader(content))
		if err != nil {
			return nil, errs.Wrap(errs.Malformed, err, "profile values file %q is not valid YAML", m.Type.Values)
		}
		p.values = vals
	}

	targets := map[string]bool{}
	for _, r := range m.Type.ConfigResource {
		name, err := manifestPath(manifestName, "filepath", r.FilePath)
		if err != nil {
			return nil, err
		}
		content, ok := files[path.Join(base, name)]
		if !ok {
			return nil, errs.New(errs.Malformed, "profile manifest %q names file %q, which is not in the archive", manifestName, r.FilePath)
		}
		target, err := manifestPath(manifestName, "chartpath", r.ChartPath)
		if err != nil {
			return nil, err
		}
		if !strings.Contains(target, "/") {
			return nil, errs.New(errs.Malformed, "profile manifest %q: chartpath %q must start with the chart's directory, as in mychart/templates/config.yaml", manifestName, r.ChartPath)
		}
		if targets[target] {
			return nil, errs.New(errs.Malformed, "profile manifest %q: chartpath %q is named more than once", manifestName, r.ChartPath)
		}
		targets[target] = true
		p.files = append(p.files, ProfileFile{Path: name, ChartPath: target, Data: content})
	}
	return p, nil
}

// profileBase finds manifest.yaml: at the root of the archive, or else in the
// archive's only top-level directory. It returns the directory that holds it.
func profileBase(raw []file, files map[string][]byte) (string, error) {
	if _, ok := files[ManifestFile]; ok {
		return "", nil
	}
	top := ""
	for _, f := range raw {
		dir, _, ok := strings.Cut(f.name, "/")
		if !ok || (top != "" && dir != top) {
			top = ""
			break
		}
		top = dir
	}
	if top != "" {
		if _, ok := files[path.Join(top, ManifestFile)]; ok {
			return top, nil
		}
	}
	return "", errs.New(errs.Malformed, "profile archive has no %s at its root", ManifestFile)
}

// manifestPath checks a path the manifest names (field is the manifest field)
// and returns it cleaned.
func manifestPath(manifestName, field, p string) (string, error) {
	switch {
	case strings.TrimSpace(p) == "":
		return "", errs.New(errs.Malformed, "profile manifest %q has an empty %s", manifestName, field)
	case strings.ContainsRune(p, '\\'):
		return "", errs.New(errs.Malformed, "profile manifest %q: %s %q contains a backslash; path elements must be separated by /", manifestName, field, p)
	case strings.HasPrefix(p, "/") || drivePath.MatchString(p):
		return "", errs.New(errs.Malformed, "profile manifest %q: %s %q is an absolute path", manifestName, field, p)
	case checkRelative(p) != nil:
		return "", errs.New(errs.Malformed, "profile manifest %q: %s %q escapes the %s directory", manifestName, field, p, escapeDir(field))
	}
	clean := path.Clean(p)
	if clean == "." {
		return "", errs.New(errs.Malformed, "profile manifest %q: %s %q names no file", manifestName, field, p)
	}
	return clean, nil
}

func escapeDir(field string) string {
	if field == "chartpath" {
		return "chart"
	}
	return "profile"
}
