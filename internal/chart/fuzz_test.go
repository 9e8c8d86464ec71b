package chart

import (
	"archive/tar"
	"testing"

	"github.com/atoll-edge/atoll/internal/errs"
)

// fuzzLimits keep the fuzzer's inputs cheap while still reaching every limit.
var fuzzLimits = Limits{MaxCompressed: 1 << 20, MaxUncompressed: 4 << 20, MaxFiles: 200, MaxFileSize: 1 << 20}

func FuzzCheckChart(f *testing.F) {
	f.Add(chartTGZ(f, "simple"))
	f.Add(chartTGZ(f, "legacy"))
	f.Add(chartTGZ(f, "parent"))
	f.Add(tgz(f, reg("demo/Chart.yaml", demoChartYAML), regBytes("demo/charts/child-0.1.0.tgz", chartTGZ(f, "child"))))
	f.Add(tgz(f, reg("demo/Chart.yaml", demoChartYAML), reg("../x", "x")))
	f.Add(tgz(f, reg("demo/Chart.yaml", demoChartYAML), special("demo/l", tar.TypeSymlink, "/")))
	f.Add(tgz(f, reg("demo/Chart.yaml", "apiVersion: v2\nname: demo\n")))
	f.Add(gzipOf(f, []byte("hello")))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := CheckChart(data, fuzzLimits)
		if err != nil {
			if c != nil {
				t.Fatalf("chart returned with error %v", err)
			}
			if errs.KindOf(err) == "" {
				t.Fatalf("error without a kind: %v", err)
			}
			return
		}
		if c.Name() == "" || c.Version() == "" || c.Loaded() == nil || c.Digest == "" {
			t.Fatalf("accepted chart without name, version or digest: %+v", c)
		}
	})
}

func FuzzCheckProfile(f *testing.F) {
	f.Add(tgz(f, dirEntries(f, "testdata/profiles/basic", "")...))
	f.Add(tgz(f, dirEntries(f, "testdata/profiles/basic", "basic/")...))
	f.Add(tgz(f, reg("manifest.yaml", "type:\n  values: v.yaml\n"), reg("v.yaml", "a: [1\n")))
	f.Add(tgz(f, reg("manifest.yaml", "type:\n  configresource:\n    - filepath: a\n      chartpath: ../a\n"), reg("a", "a")))
	f.Add(gzipOf(f, []byte("version: v1\n")))
	f.Add([]byte("version: v1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := CheckProfile(data, fuzzLimits)
		if err != nil {
			if p != nil {
				t.Fatalf("profile returned with error %v", err)
			}
			if errs.KindOf(err) == "" {
				t.Fatalf("error without a kind: %v", err)
			}
			return
		}
		if p.Values() == nil || p.Digest == "" {
			t.Fatalf("accepted profile without values map or digest")
		}
		for _, pf := range p.Files() {
			if pf.ChartPath == "" || pf.Path == "" || checkRelative(pf.ChartPath) != nil {
				t.Fatalf("accepted unsafe profile file %+v", pf)
			}
		}
	})
}
