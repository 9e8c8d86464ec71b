package kubeconfig

import (
	"encoding/base64"
	"errors"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/atoll-edge/atoll/internal/errs"
)

// The messages of clientcmd.Load's errors can quote the file: a duplicate
// name error prints the whole list, credentials included, and the YAML
// converter prints keys and values it cannot convert. loadError therefore
// never passes on the parser's message. It recognises a few shapes and
// keeps only what cannot come from the file: a line number, a fixed YAML
// problem, a path of field names, a Go type.
var (
	// yamlRE matches YAML syntax errors; group 1 is the line, group 2 the
	// problem, which is kept only if it is one of yamlProblems.
	yamlRE = regexp.MustCompile(`(?:^|: )yaml: (?:line ([0-9]{1,9}): )?(.+)$`)
	// typeRE matches a value of the wrong JSON type. The field path is
	// made of struct field names and JSON tags, never map keys; the value,
	// which can be a number from the file, is left out.
	typeRE = regexp.MustCompile(`^json: cannot unmarshal [a-z]+(?: [0-9eE.+-]+)? into Go struct field [A-Za-z0-9_]+\.([A-Za-z0-9_.-]{1,200}) of type ([A-Za-z0-9_.*\[\]]{1,100})$`)
	// dupRE matches the conversion error for two entries of the same name.
	dupRE = regexp.MustCompile(`^error converting \*\[\]Named(Cluster|AuthInfo|Context|Extension) into `)
)

// yamlProblems are the fixed problem messages of the YAML parser
// (go.yaml.in/yaml/v2's scanner, parser and reader), which quote nothing.
var yamlProblems = map[string]bool{
	"block sequence entries are not allowed in this context":       true,
	"control characters are not allowed":                           true,
	"could not find expected ':'":                                  true,
	"could not find expected directive name":                       true,
	"did not find URI escaped octet":                               true,
	"did not find expected '!'":                                    true,
	"did not find expected ',' or ']'":                             true,
	"did not find expected ',' or '}'":                             true,
	"did not find expected '-' indicator":                          true,
	"did not find expected <document start>":                       true,
	"did not find expected alphabetic or numeric character":        true,
	"did not find expected comment or line break":                  true,
	"did not find expected key":                                    true,
	"did not find expected node content":                           true,
	"did not find expected tag URI":                                true,
	"did not find expected whitespace or line break":               true,
	"did not find expected whitespace":                             true,
	"document contains excessive aliasing":                         true,
	"found a tab character that violates indentation":              true,
	"found a tab character where an indentation space is expected": true,
	"found an incorrect leading UTF-8 octet":                       true,
	"found an incorrect trailing UTF-8 octet":                      true,
	"found character that cannot start any token":                  true,
	"found incompatible YAML document":                             true,
	"found undefined tag handle":                                   true,
	"found unexpected document indicator":                          true,
	"found unexpected end of stream":                               true,
	"found unknown escape character":                               true,
	"incomplete UTF-8 octet sequence":                              true,
	"invalid leading UTF-8 octet":                                  true,
	"invalid trailing UTF-8 octet":                                 true,
	"invalid Unicode character":                                    true,
	"mapping keys are not allowed in this context":                 true,
	"mapping values are not allowed in this context":               true,
}

// loadError describes an error of clientcmd.Load, as errs.Malformed,
// without quoting the file.
func loadError(err error) error {
	msg := err.Error()
	var b64 base64.CorruptInputError
	switch {
	case errors.As(err, &b64):
		return errs.New(errs.Malformed, "a *-data field of the kubeconfig is not valid base64: embed the file contents base64-encoded (e.g. `base64 -w0 FILE`)")
	case runtime.IsNotRegisteredError(err):
		return errs.New(errs.Malformed, "the file is not a kubeconfig: it must have apiVersion v1 and kind Config")
	case strings.HasPrefix(msg, "couldn't get version/kind"):
		return errs.New(errs.Malformed, "the file is not a kubeconfig: it must be a YAML or JSON mapping with clusters, users and contexts")
	}
	if m := dupRE.FindStringSubmatch(msg); m != nil {
		list := map[string]string{"Cluster": "clusters", "AuthInfo": "users", "Context": "contexts", "Extension": "extensions"}[m[1]]
		return errs.New(errs.Malformed, "the kubeconfig has two %s with the same name: give each a unique name", list)
	}
	if m := typeRE.FindStringSubmatch(msg); m != nil {
		if want := describeType(m[2]); want != "" {
			return errs.New(errs.Malformed, "the kubeconfig field %s must be %s", m[1], want)
		}
		return errs.New(errs.Malformed, "the kubeconfig field %s has a value of the wrong type", m[1])
	}
	if m := yamlRE.FindStringSubmatch(msg); m != nil {
		var where, what string
		if m[1] != "" {
			where = " at line " + m[1]
		}
		if yamlProblems[m[2]] {
			what = ": " + m[2]
		}
		return errs.New(errs.Malformed, "the kubeconfig is not valid YAML%s%s", where, what)
	}
	return errs.New(errs.Malformed, "the kubeconfig cannot be parsed: check that it is a kubeconfig in YAML or JSON")
}

// describeType says in words what a value of the Go type t looks like in
// YAML, or returns "" if it does not know t.
func describeType(t string) string {
	switch {
	case t == "string":
		return "a string"
	case t == "bool":
		return "true or false"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"), strings.HasPrefix(t, "float"):
		return "a number"
	case t == "[]uint8":
		return "a base64-encoded string"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["), strings.HasPrefix(t, "v1."), strings.HasPrefix(t, "*v1."):
		return "a mapping"
	}
	return ""
}

func encodeBase64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
