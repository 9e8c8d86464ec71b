package api

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

var wildcard = regexp.MustCompile(`\{([A-Za-z0-9]+)\}`)

type obj = map[string]any

func ref(name string) obj { return obj{"$ref": "#/components/schemas/" + name} }

func schemaOf(name string) obj {
	if rest, ok := strings.CutPrefix(name, "[]"); ok {
		return obj{"type": "array", "items": schemaOf(rest)}
	}
	return ref(name)
}

func str(desc string) obj { return obj{"type": "string", "description": desc} }

// components are the schemas that routes name.
var components = obj{
	"Metadata": obj{"type": "object", "required": []string{"name"}, "properties": obj{
		"name":        obj{"type": "string", "maxLength": 63, "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "description": "DNS-1123 label"},
		"description": str("free text, at most 4096 bytes"),
		"userData1":   str("free text, at most 4096 bytes"),
		"userData2":   str("free text, at most 4096 bytes"),
	}},
	"Project":         obj{"type": "object", "required": []string{"metadata"}, "properties": obj{"metadata": ref("Metadata")}},
	"ClusterProvider": obj{"type": "object", "required": []string{"metadata"}, "properties": obj{"metadata": ref("Metadata")}},
	"Cluster": obj{"type": "object", "required": []string{"metadata"}, "description": "As a multipart upload: the JSON of this object in a field named metadata, and the kubeconfig (at most 1 MiB; no exec or auth-provider plugins unless the hub allows them; no file references) in a part named file.",
		"properties": obj{"metadata": ref("Metadata"), "spec": obj{"type": "object", "additionalProperties": true}}},
	"ClusterLabel": obj{"type": "object", "required": []string{"clusterLabel"}, "properties": obj{
		"metadata":     ref("Metadata"),
		"clusterLabel": obj{"type": "string", "maxLength": 63, "description": "a Kubernetes label value"},
	}},
	"ClusterKvPairs": obj{"type": "object", "required": []string{"metadata"}, "properties": obj{
		"metadata": ref("Metadata"),
		"spec": obj{"type": "object", "properties": obj{"kv": obj{"type": "array", "items": obj{
			"type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": true}}}},
	}},
	"ClusterStatus": obj{"type": "object", "properties": obj{
		"metadata":            ref("Metadata"),
		"state":               obj{"type": "string", "enum": []string{"Pending", "Reachable", "Unreachable"}},
		"reachable":           obj{"type": "boolean"},
		"server":              str("the API server URL"),
		"kubernetesVersion":   str("gitVersion from /version"),
		"apiGroups":           obj{"type": "integer"},
		"lastError":           str("why the last probe failed"),
		"since":               obj{"type": "string", "format": "date-time", "description": "when the state last changed"},
		"lastProbe":           obj{"type": "string", "format": "date-time"},
		"nextProbe":           obj{"type": "string", "format": "date-time"},
		"consecutiveFailures": obj{"type": "integer"},
		"capacity": obj{"type": "object", "properties": obj{
			"nodes": obj{"type": "integer"}, "cpu": str("sum of allocatable cpu"), "memory": str("sum of allocatable memory"), "pods": obj{"type": "integer"},
		}},
	}},
	"Error": obj{"type": "object", "required": []string{"code", "reason", "message"}, "properties": obj{
		"code": obj{"type": "integer"}, "reason": obj{"type": "string"}, "message": obj{"type": "string"},
	}},
	"Health": obj{"type": "object", "properties": obj{"status": obj{"type": "string"}}},
	"CompositeApp": obj{"type": "object", "required": []string{"metadata", "spec"}, "properties": obj{
		"metadata": ref("Metadata"),
		"spec":     obj{"type": "object", "required": []string{"compositeAppVersion"}, "properties": obj{"compositeAppVersion": str("DNS-1123 label, e.g. v1")}},
	}},
	"App": obj{"type": "object", "required": []string{"metadata"}, "description": "As a multipart upload: this JSON in a field named metadata and the Helm chart (.tgz) in a part named file.",
		"properties": obj{"metadata": ref("Metadata")}},
	"CompositeProfile": obj{"type": "object", "required": []string{"metadata"}, "properties": obj{"metadata": ref("Metadata")}},
	"Profile": obj{"type": "object", "required": []string{"metadata", "spec"}, "description": "As a multipart upload: this JSON in a field named metadata and the profile archive (.tgz with manifest.yaml naming override_values.yaml and extra files) in a part named file.",
		"properties": obj{"metadata": ref("Metadata"), "spec": obj{"type": "object", "required": []string{"app"}, "properties": obj{"app": str("the app this profile customises")}}}},
	"DeploymentIntentGroup": obj{"type": "object", "required": []string{"metadata", "spec"}, "properties": obj{
		"metadata": ref("Metadata"),
		"spec": obj{"type": "object", "required": []string{"compositeProfile", "version"}, "properties": obj{
			"compositeProfile": str("the composite profile to deploy with"),
			"version":          str("the DIG's version"),
			"logicalCloud":     str("the logical cloud (not used yet)"),
			"namespace":        str("namespace the apps are deployed into (default: default)"),
			"overrideValues": obj{"type": "array", "items": obj{"type": "object", "required": []string{"app"}, "properties": obj{
				"app":    str("the app"),
				"values": obj{"type": "object", "additionalProperties": true, "description": "Helm values; keys with dots are --set paths"},
			}}},
		}},
	}},
	"GenericPlacementIntent": obj{"type": "object", "required": []string{"metadata"}, "properties": obj{"metadata": ref("Metadata"), "spec": obj{"type": "object"}}},
	"PlacementTerm": obj{"type": "object", "properties": obj{
		"clusterProvider": obj{"type": "string"}, "cluster": obj{"type": "string"}, "clusterLabel": obj{"type": "string"},
		"anyOf": obj{"type": "array", "items": ref("PlacementTerm")},
	}},
	"AppIntent": obj{"type": "object", "required": []string{"metadata", "spec"}, "properties": obj{
		"metadata": ref("Metadata"),
		"spec": obj{"type": "object", "required": []string{"app", "intent"}, "properties": obj{
			"app": obj{"type": "string"},
			"intent": obj{"type": "object", "properties": obj{
				"allOf": obj{"type": "array", "items": ref("PlacementTerm")},
				"anyOf": obj{"type": "array", "items": ref("PlacementTerm")},
			}},
		}},
	}},
	"DIGIntent": obj{"type": "object", "required": []string{"metadata", "spec"}, "properties": obj{
		"metadata": ref("Metadata"),
		"spec": obj{"type": "object", "properties": obj{"intent": obj{"type": "object", "required": []string{"genericPlacementIntent"},
			"additionalProperties": obj{"type": "string"}}}},
	}},
	"LifecycleState": obj{"type": "object", "properties": obj{
		"state":     obj{"type": "string", "enum": []string{"Created", "Approved", "Instantiated", "Terminating", "Terminated", "Stopped"}},
		"revision":  obj{"type": "integer"},
		"stateInfo": obj{"type": "object", "properties": obj{"actions": obj{"type": "array", "items": obj{"type": "object"}}}},
	}},
	"AppDependency": obj{"type": "object", "required": []string{"metadata", "spec"}, "properties": obj{
		"metadata": ref("Metadata"),
		"spec": obj{"type": "object", "required": []string{"app"}, "properties": obj{
			"app":      str("the app this one waits for, on each cluster"),
			"opStatus": obj{"type": "string", "enum": []string{"Ready", "Deployed"}, "description": "the state it must reach (default Ready)"},
			"wait":     obj{"type": "integer", "minimum": 0, "description": "seconds to wait after that"},
		}},
	}},
	"Rollback": obj{"type": "object", "required": []string{"spec"}, "properties": obj{
		"metadata": ref("Metadata"),
		"spec":     obj{"type": "object", "required": []string{"revision"}, "properties": obj{"revision": obj{"type": "integer", "minimum": 1}}},
	}},
	"DIGStatus": obj{"type": "object", "description": "EMCO's status shape: the DIG's state, stateInfo, deployed and ready counts, and per app, cluster and resource their status."},
	"OpenAPI":   obj{"type": "object", "description": "an OpenAPI 3.0 document"},
}

var errorCodes = map[string][]int{
	"GET":    {400, 404},
	"POST":   {400, 404, 409, 413, 415, 422},
	"PUT":    {400, 404, 409, 413, 415, 422},
	"DELETE": {400, 404, 409},
}

// OpenAPI returns the OpenAPI 3 document of routes.
func OpenAPI(routes []Route) obj {
	paths := obj{}
	schemas := obj{}
	for k, v := range components {
		schemas[k] = v
	}
	for _, rt := range routes {
		for k, v := range rt.Schemas {
			schemas[k] = v
		}
	}
	for _, rt := range routes {
		p, _ := paths[rt.Pattern].(obj)
		if p == nil {
			p = obj{}
			paths[rt.Pattern] = p
		}
		op := obj{
			"summary":     rt.Summary,
			"operationId": operationID(rt),
			"tags":        []string{rt.Tag},
		}
		var params []obj
		for _, m := range wildcard.FindAllStringSubmatch(rt.Pattern, -1) {
			params = append(params, obj{"name": m[1], "in": "path", "required": true, "schema": obj{"type": "string"}})
		}
		if rt.Method == "PUT" || rt.Method == "DELETE" {
			params = append(params, obj{"name": "If-Match", "in": "header", "required": false,
				"description": "the ETag of an earlier GET: the change is refused with 409 if the object changed since", "schema": obj{"type": "string"}})
		}
		if rt.Pattern == clustersPath && rt.Method == "GET" {
			params = append(params, obj{"name": "label", "in": "query", "required": false,
				"description": "only the names of the clusters with this label", "schema": obj{"type": "string"}})
		}
		if params != nil {
			op["parameters"] = params
		}
		if rt.Request != "" {
			if name, ok := strings.CutPrefix(rt.Request, "multipart:"); ok {
				op["requestBody"] = obj{"required": true, "content": obj{
					"multipart/form-data": obj{"schema": obj{"type": "object", "required": []string{"metadata"}, "properties": obj{
						"metadata": obj{"type": "string", "description": "the JSON of a " + name},
						"file":     obj{"type": "string", "format": "binary"},
					}}},
					"application/json": obj{"schema": ref(name)},
				}}
			} else {
				op["requestBody"] = obj{"required": true, "content": obj{"application/json": obj{"schema": ref(rt.Request)}}}
			}
		}
		responses := obj{}
		ok := obj{"description": http.StatusText(rt.Status)}
		if rt.Response != "" {
			ok["content"] = obj{"application/json": obj{"schema": schemaOf(rt.Response)}}
		}
		responses[strconv.Itoa(rt.Status)] = ok
		if strings.HasPrefix(rt.Pattern, "/v2/") {
			for _, code := range errorCodes[rt.Method] {
				responses[strconv.Itoa(code)] = obj{"description": http.StatusText(code),
					"content": obj{"application/json": obj{"schema": ref("Error")}}}
			}
		}
		if rt.Pattern == "/readyz" {
			responses["503"] = obj{"description": "the store does not answer", "content": obj{"application/json": obj{"schema": ref("Error")}}}
		}
		op["responses"] = responses
		p[strings.ToLower(rt.Method)] = op
	}
	return obj{
		"openapi": "3.0.3",
		"info": obj{"title": "Atoll hub API", "version": "v2",
			"description": "EMCO-compatible API of the Atoll hub. Errors are JSON objects {code, reason, message}. GET answers carry an ETag (the object's revision); send it back as If-Match to PUT or DELETE with compare-and-swap."},
		"paths":      paths,
		"components": obj{"schemas": schemas},
	}
}

func operationID(rt Route) string {
	parts := strings.FieldsFunc(wildcard.ReplaceAllString(rt.Pattern, "by-$1"), func(r rune) bool { return r == '/' || r == '-' })
	var b strings.Builder
	b.WriteString(strings.ToLower(rt.Method))
	for _, p := range parts {
		if p == "v2" {
			continue
		}
		b.WriteString(strings.ToUpper(p[:1]) + p[1:])
	}
	return b.String()
}
