package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// decodeObjects decodes one YAML document rendered from source into Kubernetes
// objects: none for an empty document (only comments), the items of a List, or
// the object itself. Every object must have an apiVersion, a kind and a name.
func decodeObjects(source, doc string) ([]map[string]any, error) {
	j, err := utilyaml.ToJSON([]byte(doc))
	if err != nil {
		return nil, fmt.Errorf("YAML parse error on %s: %w", source, err)
	}
	var v any
	if err := utiljson.Unmarshal(j, &v); err != nil {
		return nil, fmt.Errorf("YAML parse error on %s: %w", source, err)
	}
	if v == nil {
		return nil, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: a manifest is a %s, not a Kubernetes object", source, jsonType(v))
	}
	if items, isList := obj["items"].([]any); isList && isListKind(obj) {
		out := make([]map[string]any, 0, len(items))
		for i, it := range items {
			m, ok := it.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s: item %d of a %v is a %s, not a Kubernetes object", source, i, obj["kind"], jsonType(it))
			}
			if err := checkObject(source, m); err != nil {
				return nil, err
			}
			out = append(out, m)
		}
		return out, nil
	}
	if err := checkObject(source, obj); err != nil {
		return nil, err
	}
	return []map[string]any{obj}, nil
}

// isListKind reports whether obj is a v1 List or a typed list (ConfigMapList).
func isListKind(obj map[string]any) bool {
	kind, _ := obj["kind"].(string)
	return len(kind) > len("List") && kind[len(kind)-len("List"):] == "List" || kind == "List"
}

// checkObject checks what every Kubernetes object has.
func checkObject(source string, obj map[string]any) error {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	switch {
	case kind == "":
		return fmt.Errorf("%s: manifest has no kind", source)
	case apiVersion == "":
		return fmt.Errorf("%s: %s manifest has no apiVersion", source, kind)
	}
	md, ok := obj["metadata"].(map[string]any)
	if !ok {
		if _, present := obj["metadata"]; present {
			return fmt.Errorf("%s: %s manifest has a metadata that is not a map", source, kind)
		}
		return fmt.Errorf("%s: %s manifest has no metadata.name", source, kind)
	}
	name, _ := md["name"].(string)
	generateName, _ := md["generateName"].(string)
	if name == "" && generateName == "" {
		return fmt.Errorf("%s: %s manifest has no metadata.name", source, kind)
	}
	if ns, present := md["namespace"]; present {
		if _, ok := ns.(string); !ok && ns != nil {
			return fmt.Errorf("%s: %s %q has a metadata.namespace that is not a string", source, kind, name)
		}
	}
	return nil
}

func jsonType(v any) string {
	switch v.(type) {
	case []any:
		return "list"
	case string:
		return "string"
	case bool:
		return "boolean"
	case map[string]any:
		return "map"
	default:
		return "number"
	}
}

// hashObject returns "sha256:<hex>" of obj's JSON encoding; encoding/json sorts
// map keys, so equal objects hash equal.
func hashObject(obj map[string]any) (string, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// mergeLayers merges the values layers in order, as Helm merges several values
// files: into a new map, never modifying the layers.
func mergeLayers(layers []map[string]any) map[string]any {
	out := map[string]any{}
	for _, l := range layers {
		if l == nil {
			continue
		}
		out = loader.MergeMaps(out, copyMap(l))
	}
	return out
}

// copyMap deep-copies the maps and lists of a values tree (leaves are shared:
// they are immutable).
func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = copyValue(v)
	}
	return out
}

func copyValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		return copyMap(v)
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = copyValue(x)
		}
		return out
	default:
		return v
	}
}

// errNotJSON is returned when values cannot be encoded for the cache key.
var errNotJSON = errors.New("values must be JSON-compatible (maps with string keys, lists, strings, numbers, booleans, null)")
