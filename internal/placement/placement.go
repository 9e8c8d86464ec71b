// Package placement resolves an app's placement intent (EMCO's allOf / anyOf of
// clusters by name or by label) against the cluster registry.
//
// allOf yields every cluster its terms name; an anyOf (at the top or nested in
// allOf) yields exactly one cluster: the first reachable one, in name order, that
// its terms name, or the first one if none is reachable now (it is deployed there
// when it comes back). The result is deterministic for the same registry.
package placement

import (
	"sort"

	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/model"
)

// Cluster is what placement knows of one registered cluster.
type Cluster struct {
	Provider  string
	Name      string
	Labels    []string
	Reachable bool
}

// ID is "provider/name".
func (c Cluster) ID() string { return c.Provider + "/" + c.Name }

func (c Cluster) has(label string) bool {
	for _, l := range c.Labels {
		if l == label {
			return true
		}
	}
	return false
}

// Resolve returns the clusters app goes to under intent, sorted by ID, or an
// errs.Invalid error naming the term that matches no cluster.
func Resolve(app string, intent model.PlacementIntent, clusters []Cluster) ([]Cluster, error) {
	sorted := append([]Cluster(nil), clusters...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ID() < sorted[j].ID() })
	chosen := map[string]Cluster{}
	for _, t := range intent.AllOf {
		if len(t.AnyOf) > 0 {
			c, err := anyOf(app, t.AnyOf, sorted)
			if err != nil {
				return nil, err
			}
			chosen[c.ID()] = c
			continue
		}
		matched := match(t, sorted)
		if len(matched) == 0 {
			return nil, errs.New(errs.Invalid, "placement of app %q: %s matches no cluster", app, describe(t))
		}
		for _, c := range matched {
			chosen[c.ID()] = c
		}
	}
	if len(intent.AnyOf) > 0 {
		c, err := anyOf(app, intent.AnyOf, sorted)
		if err != nil {
			return nil, err
		}
		chosen[c.ID()] = c
	}
	if len(chosen) == 0 {
		return nil, errs.New(errs.Invalid, "placement of app %q selects no cluster", app)
	}
	out := make([]Cluster, 0, len(chosen))
	for _, c := range chosen {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID() < out[j].ID() })
	return out, nil
}

func anyOf(app string, terms []model.PlacementTerm, sorted []Cluster) (Cluster, error) {
	var candidates []Cluster
	seen := map[string]bool{}
	for _, t := range terms {
		for _, c := range match(t, sorted) {
			if !seen[c.ID()] {
				seen[c.ID()] = true
				candidates = append(candidates, c)
			}
		}
	}
	if len(candidates) == 0 {
		desc := ""
		for i, t := range terms {
			if i > 0 {
				desc += ", "
			}
			desc += describe(t)
		}
		return Cluster{}, errs.New(errs.Invalid, "placement of app %q: anyOf [%s] matches no cluster", app, desc)
	}
	sort.Slice(candidates, func(i, j int) bool { return candidates[i].ID() < candidates[j].ID() })
	for _, c := range candidates {
		if c.Reachable {
			return c, nil
		}
	}
	return candidates[0], nil
}

func match(t model.PlacementTerm, sorted []Cluster) []Cluster {
	var out []Cluster
	for _, c := range sorted {
		if c.Provider != t.ClusterProvider {
			continue
		}
		if (t.Cluster != "" && c.Name == t.Cluster) || (t.ClusterLabel != "" && c.has(t.ClusterLabel)) {
			out = append(out, c)
		}
	}
	return out
}

func describe(t model.PlacementTerm) string {
	if t.Cluster != "" {
		return "cluster " + t.ClusterProvider + "/" + t.Cluster
	}
	return "label " + t.ClusterLabel + " of cluster provider " + t.ClusterProvider
}
