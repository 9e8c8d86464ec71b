package chart

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"

	"github.com/atoll-edge/atoll/internal/errs"
)

// maxSubchartDepth caps how deep subchart archives (charts/x.tgz holding
// charts/y.tgz ...) may nest.
const maxSubchartDepth = 8

// Chart is a Helm chart that passed CheckChart.
type Chart struct {
	// Digest is "sha256:<hex>" of the archive as uploaded.
	Digest string

	loaded *chartv2.Chart
}

// Name returns the chart's name (Chart.yaml name).
func (c *Chart) Name() string { return c.loaded.Metadata.Name }

// Version returns the chart's version (Chart.yaml version).
func (c *Chart) Version() string { return c.loaded.Metadata.Version }

// Loaded returns the chart as the Helm v4 loader loaded it. Callers must not
// modify it: render works on a copy.
func (c *Chart) Loaded() *chartv2.Chart { return c.loaded }

// CheckChart checks data, a Helm chart archive (.tgz) as uploaded, against lim
// and the rules of the package, loads it with the Helm v4 loader and validates
// its metadata. A chart archive holds exactly one top-level directory, the chart
// (as `helm package` writes it); subchart archives under charts/ are checked the
// same way, against the same budget.
//
// Errors are errs.TooLarge (a limit), errs.Malformed (not gzip/tar, an unsafe
// entry, a file Helm cannot parse) or errs.Invalid (Helm's metadata validation,
// an unsupported apiVersion, a library chart, a missing dependency), each with a
// message naming the problem.
func CheckChart(data []byte, lim Limits) (*Chart, error) {
	lim = lim.withDefaults()
	k := archiveKind{what: "chart archive", dir: "chart"}
	if err := checkCompressed(k, data, lim); err != nil {
		return nil, err
	}
	b := &budget{lim: lim}
	files, err := readChartFiles(k, data, b, 0)
	if err != nil {
		return nil, err
	}
	c, err := loader.LoadFiles(files)
	if err != nil {
		return nil, loadError(err)
	}
	if err := checkLoaded(c); err != nil {
		return nil, err
	}
	return &Chart{Digest: digest(data), loaded: c}, nil
}

// readChartFiles reads and checks one chart archive (the uploaded one, or a
// subchart archive inside it) and returns its files named as Helm names them:
// relative to the chart directory.
func readChartFiles(k archiveKind, data []byte, b *budget, depth int) ([]*archive.BufferedFile, error) {
	raw, err := readArchive(k, data, b)
	if err != nil {
		return nil, err
	}
	top := ""
	out := make([]*archive.BufferedFile, 0, len(raw))
	for _, f := range raw {
		dir, rest, ok := strings.Cut(f.name, "/")
		if !ok {
			return nil, errs.New(errs.Malformed, "%s entry %q is not inside the chart's directory", k.what, f.name)
		}
		if top == "" {
			top = dir
		} else if dir != top {
			return nil, errs.New(errs.Malformed, "%s entry %q is outside the chart directory %q; an archive holds one chart", k.what, f.name, top+"/")
		}
		if isSubchartArchive(rest) {
			if depth+1 > maxSubchartDepth {
				return nil, errs.New(errs.Malformed, "%s: subchart archives nest more than %d deep", k.what, maxSubchartDepth)
			}
			sk := archiveKind{what: fmt.Sprintf("subchart archive %q", f.name), dir: "chart"}
			if _, err := readChartFiles(sk, f.data, b, depth+1); err != nil {
				return nil, err
			}
		}
		out = append(out, &archive.BufferedFile{Name: rest, ModTime: f.mod, Data: f.data})
	}
	return out, nil
}

// isSubchartArchive reports whether p, relative to a chart directory, is a
// subchart archive that Helm's loader unpacks: charts/x.tgz, or
// charts/sub/charts/x.tgz inside an unpacked subchart, and so on. Like Helm, it
// ignores names starting with "_" or ".".
func isSubchartArchive(p string) bool {
	parts := strings.Split(p, "/")
	for len(parts) >= 2 && parts[0] == "charts" {
		if strings.IndexAny(parts[1], "_.") == 0 {
			return false
		}
		if len(parts) == 2 {
			return path.Ext(parts[1]) == ".tgz"
		}
		parts = parts[2:]
	}
	return false
}

// loadError classifies an error of Helm's loader: its validation errors are
// Invalid, the rest (a file it cannot parse, Chart.yaml missing) Malformed.
func loadError(err error) error {
	var ve chartv2.ValidationError
	if errors.As(err, &ve) {
		return errs.Wrap(errs.Invalid, err, "chart is not valid")
	}
	return errs.Wrap(errs.Malformed, err, "chart cannot be loaded")
}

// checkLoaded checks what Helm's loader leaves to `helm install`: the chart is
// an application chart of a known apiVersion whose dependencies are present.
func checkLoaded(c *chartv2.Chart) error {
	md := c.Metadata
	switch md.APIVersion {
	case chartv2.APIVersionV2, chartv2.APIVersionV1:
	default:
		return errs.New(errs.Invalid, "chart %q has apiVersion %q; only v2 (and legacy v1) charts are supported", md.Name, md.APIVersion)
	}
	switch md.Type {
	case "", "application":
	default:
		return errs.New(errs.Invalid, "chart %q is a %s chart; %s charts are not installable", md.Name, md.Type, md.Type)
	}
	return checkDependencies(c)
}

// checkDependencies refuses a chart whose Chart.yaml (or requirements.yaml)
// names a dependency that is not under its charts/ directory, as `helm install`
// and `helm template` do (action.CheckDependencies: the top chart only).
func checkDependencies(c *chartv2.Chart) error {
	have := map[string]bool{}
	for _, d := range c.Dependencies() {
		have[d.Name()] = true
	}
	var missing []string
	for _, d := range c.Metadata.Dependencies {
		if d != nil && !have[d.Name] {
			missing = append(missing, d.Name)
		}
	}
	if len(missing) > 0 {
		return errs.New(errs.Invalid, "chart %q: found in Chart.yaml, but missing in charts/ directory: %s", c.Metadata.Name, strings.Join(missing, ", "))
	}
	return nil
}
