package model

import (
	"encoding/json"

	"github.com/atoll-edge/atoll/internal/errs"
)

// CompositeApp is a versioned set of apps (Helm charts) of a project.
type CompositeApp struct {
	Metadata Metadata         `json:"metadata"`
	Spec     CompositeAppSpec `json:"spec"`
}

// Meta returns the object's metadata.
func (c *CompositeApp) Meta() *Metadata { return &c.Metadata }

// CompositeAppSpec names the version.
type CompositeAppSpec struct {
	Version string `json:"compositeAppVersion"`
}

// App is one Helm chart of a composite app, as the API shows it.
type App struct {
	Metadata Metadata `json:"metadata"`
}

// Meta returns the object's metadata.
func (a *App) Meta() *Metadata { return &a.Metadata }

// ChartRef points at a chart archive in the blob store.
type ChartRef struct {
	Digest  string `json:"digest"`
	Size    int64  `json:"size"`
	Name    string `json:"name"`
	Version string `json:"version"`
}

// AppRecord is an app as stored: the API object and its chart.
type AppRecord struct {
	App
	Chart ChartRef `json:"chart"`
}

// CompositeProfile groups one profile per app of a composite app.
type CompositeProfile struct {
	Metadata Metadata `json:"metadata"`
}

// Meta returns the object's metadata.
func (c *CompositeProfile) Meta() *Metadata { return &c.Metadata }

// Profile customises one app: override values and extra files, in an archive.
type Profile struct {
	Metadata Metadata    `json:"metadata"`
	Spec     ProfileSpec `json:"spec"`
}

// Meta returns the object's metadata.
func (p *Profile) Meta() *Metadata { return &p.Metadata }

// ProfileSpec names the app the profile is for.
type ProfileSpec struct {
	App string `json:"app"`
}

// ProfileRecord is a profile as stored: the API object and its archive.
type ProfileRecord struct {
	Profile
	Archive ChartRef `json:"archive"`
}

// DeploymentIntentGroup says which composite app version is deployed with which
// profile and values.
type DeploymentIntentGroup struct {
	Metadata Metadata `json:"metadata"`
	Spec     DIGSpec  `json:"spec"`
}

// Meta returns the object's metadata.
func (d *DeploymentIntentGroup) Meta() *Metadata { return &d.Metadata }

// DIGSpec is EMCO's deployment intent group spec. Namespace is Atoll's: the
// namespace the apps are deployed into until logical clouds exist (default "default").
type DIGSpec struct {
	Profile        string          `json:"compositeProfile"`
	Version        string          `json:"version"`
	LogicalCloud   string          `json:"logicalCloud,omitempty"`
	Namespace      string          `json:"namespace,omitempty"`
	OverrideValues []OverrideValue `json:"overrideValues,omitempty"`
}

// OverrideValue sets values of one app. EMCO sends flat maps whose keys are Helm
// --set paths ("image.tag": "1.2"); nested objects are accepted too.
type OverrideValue struct {
	App    string         `json:"app"`
	Values map[string]any `json:"values"`
}

// GenericPlacementIntent groups the placement of the apps of a DIG.
type GenericPlacementIntent struct {
	Metadata Metadata        `json:"metadata"`
	Spec     json.RawMessage `json:"spec,omitempty"`
}

// Meta returns the object's metadata.
func (g *GenericPlacementIntent) Meta() *Metadata { return &g.Metadata }

// AppIntent places one app.
type AppIntent struct {
	Metadata Metadata      `json:"metadata"`
	Spec     AppIntentSpec `json:"spec"`
}

// Meta returns the object's metadata.
func (a *AppIntent) Meta() *Metadata { return &a.Metadata }

// AppIntentSpec names the app and where it goes.
type AppIntentSpec struct {
	App    string          `json:"app"`
	Intent PlacementIntent `json:"intent"`
}

// PlacementIntent is EMCO's allOf / anyOf: every allOf term yields its clusters;
// an anyOf yields exactly one cluster.
type PlacementIntent struct {
	AllOf []PlacementTerm `json:"allOf,omitempty"`
	AnyOf []PlacementTerm `json:"anyOf,omitempty"`
}

// PlacementTerm is a cluster by name, all clusters with a label, or (inside allOf)
// a nested anyOf.
type PlacementTerm struct {
	ClusterProvider string          `json:"clusterProvider,omitempty"`
	Cluster         string          `json:"cluster,omitempty"`
	ClusterLabel    string          `json:"clusterLabel,omitempty"`
	AnyOf           []PlacementTerm `json:"anyOf,omitempty"`
}

// DIGIntent lists the intents a DIG uses: its generic placement intent.
type DIGIntent struct {
	Metadata Metadata      `json:"metadata"`
	Spec     DIGIntentSpec `json:"spec"`
}

// Meta returns the object's metadata.
func (d *DIGIntent) Meta() *Metadata { return &d.Metadata }

// DIGIntentSpec holds the intents by controller.
type DIGIntentSpec struct {
	Intent map[string]string `json:"intent"`
}

// AppDependency says that an app starts on a cluster only once another app has
// reached a state there (EMCO's app dependency intents).
type AppDependency struct {
	Metadata Metadata          `json:"metadata"`
	Spec     AppDependencySpec `json:"spec"`
}

// Meta returns the object's metadata.
func (d *AppDependency) Meta() *Metadata { return &d.Metadata }

// AppDependencySpec names the app depended on, the state it must reach, and the
// seconds to wait after that.
type AppDependencySpec struct {
	App      string `json:"app"`
	OpStatus string `json:"opStatus"` // Ready or Deployed
	Wait     int    `json:"wait,omitempty"`
}

// ValidateDependency checks a dependency's spec.
func ValidateDependency(self string, d *AppDependency) error {
	if d.Spec.App == "" {
		return errs.New(errs.Invalid, "spec.app is empty; name the app %q depends on", self)
	}
	if d.Spec.App == self {
		return errs.New(errs.Invalid, "app %q cannot depend on itself", self)
	}
	switch d.Spec.OpStatus {
	case "Ready", "Deployed":
	case "":
		d.Spec.OpStatus = "Ready"
	default:
		return errs.New(errs.Invalid, "spec.opStatus %q is not Ready or Deployed", d.Spec.OpStatus)
	}
	if d.Spec.Wait < 0 || d.Spec.Wait > 86400 {
		return errs.New(errs.Invalid, "spec.wait %d is not between 0 and 86400 seconds", d.Spec.Wait)
	}
	return nil
}

// Kinds of the data path.
var (
	CompositeApps           = Schema.AddVersioned("composite-apps", "composite app", Projects)
	Apps                    = Schema.Add("apps", "app", CompositeApps)
	AppDependencies         = Schema.Add("app-dependencies", "dependency", Apps)
	CompositeProfiles       = Schema.Add("composite-profiles", "composite profile", CompositeApps)
	Profiles                = Schema.Add("profiles", "profile", CompositeProfiles)
	DIGs                    = Schema.Add("deployment-intent-groups", "deployment intent group", CompositeApps)
	GenericPlacementIntents = Schema.Add("generic-placement-intents", "generic placement intent", DIGs)
	AppIntents              = Schema.Add("app-intents", "app intent", GenericPlacementIntents)
	DIGIntents              = Schema.Add("dig-intents", "intent", DIGs)
)

// ValidatePlacement checks the shape of an app intent: at least one term; each
// term names a provider and exactly one of cluster or label, or is a nested anyOf
// (only inside allOf).
func ValidatePlacement(p PlacementIntent) error {
	if len(p.AllOf) == 0 && len(p.AnyOf) == 0 {
		return errs.New(errs.Invalid, "spec.intent has neither allOf nor anyOf; say where the app goes")
	}
	check := func(field string, terms []PlacementTerm, nested bool) error {
		for i, t := range terms {
			where := field + "[" + itoa(i) + "]"
			if len(t.AnyOf) > 0 {
				if nested || t.ClusterProvider != "" || t.Cluster != "" || t.ClusterLabel != "" {
					return errs.New(errs.Invalid, "%s: an anyOf term stands alone and only inside allOf", where)
				}
				for j, a := range t.AnyOf {
					if err := checkTerm(where+".anyOf["+itoa(j)+"]", a); err != nil {
						return err
					}
				}
				continue
			}
			if err := checkTerm(where, t); err != nil {
				return err
			}
		}
		return nil
	}
	if err := check("spec.intent.allOf", p.AllOf, false); err != nil {
		return err
	}
	return check("spec.intent.anyOf", p.AnyOf, true)
}

func checkTerm(where string, t PlacementTerm) error {
	if len(t.AnyOf) > 0 {
		return errs.New(errs.Invalid, "%s: anyOf cannot be nested here", where)
	}
	if t.ClusterProvider == "" {
		return errs.New(errs.Invalid, "%s has no clusterProvider", where)
	}
	if (t.Cluster == "") == (t.ClusterLabel == "") {
		return errs.New(errs.Invalid, "%s needs exactly one of cluster or clusterLabel", where)
	}
	return nil
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}
