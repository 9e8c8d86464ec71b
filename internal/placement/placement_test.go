package placement

import (
	"strings"
	"testing"

	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/model"
)

func TestResolve(t *testing.T) {
	clusters := []Cluster{
		{Provider: "cp", Name: "c3", Labels: []string{"core"}, Reachable: true},
		{Provider: "cp", Name: "c1", Labels: []string{"edge"}, Reachable: true},
		{Provider: "cp", Name: "c2", Labels: []string{"edge"}, Reachable: false},
		{Provider: "other", Name: "c1", Labels: []string{"edge"}, Reachable: true},
	}
	byName := func(n string) model.PlacementTerm { return model.PlacementTerm{ClusterProvider: "cp", Cluster: n} }
	byLabel := func(l string) model.PlacementTerm { return model.PlacementTerm{ClusterProvider: "cp", ClusterLabel: l} }
	tests := []struct {
		name    string
		intent  model.PlacementIntent
		want    string
		wantErr string
	}{
		{"allOf label", model.PlacementIntent{AllOf: []model.PlacementTerm{byLabel("edge")}}, "cp/c1,cp/c2", ""},
		{"allOf name and label", model.PlacementIntent{AllOf: []model.PlacementTerm{byName("c3"), byLabel("edge")}}, "cp/c1,cp/c2,cp/c3", ""},
		{"anyOf picks the first reachable", model.PlacementIntent{AnyOf: []model.PlacementTerm{byName("c2"), byName("c3")}}, "cp/c3", ""},
		{"anyOf falls back to the first when none is reachable", model.PlacementIntent{AnyOf: []model.PlacementTerm{byName("c2")}}, "cp/c2", ""},
		{"anyOf nested in allOf", model.PlacementIntent{AllOf: []model.PlacementTerm{byName("c3"), {AnyOf: []model.PlacementTerm{byLabel("edge")}}}}, "cp/c1,cp/c3", ""},
		{"provider scopes the label", model.PlacementIntent{AllOf: []model.PlacementTerm{{ClusterProvider: "other", ClusterLabel: "edge"}}}, "other/c1", ""},
		{"unknown label", model.PlacementIntent{AllOf: []model.PlacementTerm{byLabel("nowhere")}}, "", `label nowhere of cluster provider cp matches no cluster`},
		{"unknown cluster in anyOf", model.PlacementIntent{AnyOf: []model.PlacementTerm{byName("c9")}}, "", `anyOf [cluster cp/c9] matches no cluster`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve("web", tc.intent, clusters)
			if tc.wantErr != "" {
				if errs.KindOf(err) != errs.Invalid || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want invalid containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, c := range got {
				ids = append(ids, c.ID())
			}
			if strings.Join(ids, ",") != tc.want {
				t.Fatalf("got %v, want %s", ids, tc.want)
			}
		})
	}
}
