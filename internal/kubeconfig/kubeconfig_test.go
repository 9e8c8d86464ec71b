package kubeconfig

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/atoll-edge/atoll/internal/errs"
)

// marker stands for a credential or other file content: it must never
// appear in an error message, raw or base64-encoded.
const marker = "SECRET-MARKER-9d2c41"

var markerB64 = base64.StdEncoding.EncodeToString([]byte(marker))

const server = "https://edge.example.com:6443"

// indent indents every line of s by n spaces.
func indent(s string, n int) string {
	pad := strings.Repeat(" ", n)
	var b strings.Builder
	for _, line := range strings.SplitAfter(s, "\n") {
		if line != "" {
			b.WriteString(pad + line)
		}
	}
	return b.String()
}

// doc returns a kubeconfig whose current context "edge" joins cluster
// "edge-cluster" and user "edge-admin", with the given bodies.
func doc(cluster, user string) string {
	return "apiVersion: v1\nkind: Config\ncurrent-context: edge\n" +
		"clusters:\n- name: edge-cluster\n  cluster:\n" + indent(cluster, 4) +
		"users:\n- name: edge-admin\n  user:\n" + indent(user, 4) +
		"contexts:\n- name: edge\n  context:\n    cluster: edge-cluster\n    user: edge-admin\n"
}

var (
	goodCluster = "server: " + server + "\ncertificate-authority-data: " + base64.StdEncoding.EncodeToString([]byte("fake-ca")) + "\n"
	tokenUser   = "token: " + marker + "\n"
	certUser    = "client-certificate-data: " + base64.StdEncoding.EncodeToString([]byte("fake-certificate")) + "\nclient-key-data: " + markerB64 + "\n"
	execUser    = "exec:\n  apiVersion: client.authentication.k8s.io/v1\n  command: aws\n  args: [eks, get-token, --role, " + marker + "]\n  env:\n  - name: AWS_SECRET\n    value: " + marker + "\n  interactiveMode: Never\n"
	authUser    = "auth-provider:\n  name: oidc\n  config:\n    client-secret: " + marker + "\n    id-token: " + marker + "\n"
)

type parseCase struct {
	name     string
	data     string
	opts     Options
	wantKind errs.Kind // "" for success
	wantMsg  []string  // substrings of the error message
}

var parseCases = []parseCase{
	{name: "token", data: doc(goodCluster, tokenUser)},
	{name: "client certificate data", data: doc(goodCluster, certUser)},
	{name: "json", data: `{"apiVersion":"v1","kind":"Config","current-context":"c","clusters":[{"name":"k","cluster":{"server":"http://10.0.0.1:8080"}}],"users":[{"name":"u","user":{"token":"` + marker + `"}}],"contexts":[{"name":"c","context":{"cluster":"k","user":"u"}}]}`},
	{name: "server with path", data: doc("server: https://rancher.example.com/k8s/clusters/c-1\n", tokenUser)},
	{name: "proxy url", data: doc(goodCluster+"proxy-url: socks5://proxy.example.com:1080\n", tokenUser)},

	// Size.
	{name: "empty", data: "", wantKind: errs.Malformed, wantMsg: []string{"the kubeconfig file is empty"}},
	{name: "only whitespace", data: " \n\t\n", wantKind: errs.Malformed, wantMsg: []string{"the kubeconfig file is empty"}},
	{name: "oversize", data: doc(goodCluster, tokenUser) + "#" + strings.Repeat(marker, MaxSize/len(marker)), wantKind: errs.TooLarge, wantMsg: []string{"1 MiB"}},
	{name: "exactly MaxSize", data: pad(doc(goodCluster, tokenUser), MaxSize)},

	// Cannot be parsed.
	{name: "garbage bytes", data: "\x00\x01\x02" + marker + "\xff\xfe", wantKind: errs.Malformed, wantMsg: []string{"not valid YAML"}},
	{name: "garbage text", data: "{{{ " + marker + " ]]", wantKind: errs.Malformed},
	{name: "yaml syntax", data: "current-context: " + marker + "\nclusters: [\n", wantKind: errs.Malformed, wantMsg: []string{"not valid YAML at line 2: did not find expected node content"}},
	{name: "tab indentation", data: "clusters:\n\t- " + marker + "\n", wantKind: errs.Malformed, wantMsg: []string{"not valid YAML"}},
	{name: "list at top", data: "- " + marker + "\n", wantKind: errs.Malformed, wantMsg: []string{"not a kubeconfig"}},
	{name: "scalar at top", data: marker + "\n", wantKind: errs.Malformed},
	{name: "other kind", data: "apiVersion: v1\nkind: Secret\ndata: {token: " + markerB64 + "}\n", wantKind: errs.Malformed, wantMsg: []string{"apiVersion v1 and kind Config"}},
	{name: "wrong type", data: "clusters: " + marker + "\n", wantKind: errs.Malformed, wantMsg: []string{"field clusters must be a list"}},
	{name: "token not a string", data: doc(goodCluster, "token: ["+marker+"]\n"), wantKind: errs.Malformed, wantMsg: []string{"field users.user.token must be a string"}},
	{name: "bad base64", data: doc(goodCluster, "client-certificate-data: "+marker+"!!\nclient-key-data: "+markerB64+"\n"), wantKind: errs.Malformed, wantMsg: []string{"not valid base64"}},
	{name: "duplicate user", data: addUser(doc(goodCluster, tokenUser), "edge-admin", "password: "+marker+"\n"), wantKind: errs.Malformed, wantMsg: []string{"two users with the same name"}},
	{name: "complex key", data: "? [" + marker + ", b]\n: " + marker + "\n", wantKind: errs.Malformed},

	// Current context.
	{name: "no current-context", data: strings.Replace(doc(goodCluster, tokenUser), "current-context: edge\n", "", 1), wantKind: errs.Invalid, wantMsg: []string{"no current-context"}},
	{name: "missing context", data: strings.Replace(doc(goodCluster, tokenUser), "current-context: edge\n", "current-context: nowhere\n", 1), wantKind: errs.Invalid, wantMsg: []string{`current-context "nowhere" names no context`}},
	{name: "missing cluster", data: strings.Replace(doc(goodCluster, tokenUser), "cluster: edge-cluster", "cluster: gone", 1), wantKind: errs.Invalid, wantMsg: []string{`names cluster "gone", which is not in clusters`}},
	{name: "missing user", data: strings.Replace(doc(goodCluster, tokenUser), "user: edge-admin", "user: gone", 1), wantKind: errs.Invalid, wantMsg: []string{`names user "gone", which is not in users`}},
	{name: "context without user", data: strings.Replace(doc(goodCluster, tokenUser), "    user: edge-admin\n", "", 1), wantKind: errs.Invalid, wantMsg: []string{`context "edge" has no user`}},

	// Server.
	{name: "no server", data: doc("insecure-skip-tls-verify: true\n", tokenUser), wantKind: errs.Invalid, wantMsg: []string{`cluster "edge-cluster" has no server`}},
	{name: "server without scheme", data: doc("server: edge.example.com:6443\n", tokenUser), wantKind: errs.Invalid, wantMsg: []string{"not an absolute http or https URL"}},
	{name: "server of other scheme", data: doc("server: ftp://edge.example.com\n", tokenUser), wantKind: errs.Invalid, wantMsg: []string{"not an absolute http or https URL"}},
	{name: "server without host", data: doc("server: https:///api\n", tokenUser), wantKind: errs.Invalid, wantMsg: []string{"not an absolute http or https URL"}},
	{name: "server relative", data: doc("server: /"+marker+"\n", tokenUser), wantKind: errs.Invalid, wantMsg: []string{"not an absolute http or https URL"}},
	{name: "server with password", data: doc("server: https://admin:"+marker+"@edge.example.com\n", tokenUser), wantKind: errs.Invalid, wantMsg: []string{"user name or password"}},
	{name: "bad proxy url", data: doc(goodCluster+"proxy-url: ftp://u:"+marker+"@proxy\n", tokenUser), wantKind: errs.Invalid, wantMsg: []string{"proxy-url"}},

	// Plugins.
	{name: "exec", data: doc(goodCluster, execUser), wantKind: errs.Invalid, wantMsg: []string{`user "edge-admin"`, `exec plugin "aws"`, "run programs on the hub", "--allow-kubeconfig-exec"}},
	{name: "exec allowed", data: doc(goodCluster, execUser), opts: Options{AllowExec: true}},
	{name: "exec allowed but incomplete", data: doc(goodCluster, strings.Replace(execUser, "  interactiveMode: Never\n", "", 1)), opts: Options{AllowExec: true}, wantKind: errs.Invalid, wantMsg: []string{"interactiveMode must be specified"}},
	{name: "auth-provider", data: doc(goodCluster, authUser), wantKind: errs.Invalid, wantMsg: []string{`user "edge-admin"`, `auth-provider plugin "oidc"`, "--allow-kubeconfig-exec"}},
	{name: "auth-provider allowed", data: doc(goodCluster, authUser), opts: Options{AllowExec: true}},
	{name: "exec in another user", data: addUser(doc(goodCluster, tokenUser), "other", execUser), wantKind: errs.Invalid, wantMsg: []string{`user "other"`, "exec plugin"}},

	// Files on the hub's disk.
	{name: "certificate-authority file", data: doc("server: "+server+"\ncertificate-authority: /etc/"+marker+"/ca.crt\n", tokenUser), wantKind: errs.Invalid, wantMsg: []string{`cluster "edge-cluster"`, "(certificate-authority)", "as certificate-authority-data"}},
	{name: "client certificate files", data: doc(goodCluster, "client-certificate: /home/"+marker+"/c.crt\nclient-key: /home/"+marker+"/c.key\n"), wantKind: errs.Invalid, wantMsg: []string{`user "edge-admin"`, "(client-certificate, client-key)", "as client-certificate-data, client-key-data"}},
	{name: "token file", data: doc(goodCluster, "tokenFile: /var/run/"+marker+"\n"), wantKind: errs.Invalid, wantMsg: []string{"(tokenFile)", "as token"}},
	{name: "file in another cluster", data: strings.Replace(doc(goodCluster, tokenUser), "users:", "- name: other\n  cluster:\n    server: https://other\n    certificate-authority: /"+marker+"\nusers:", 1), wantKind: errs.Invalid, wantMsg: []string{`cluster "other"`}},
	{name: "file with exec allowed", data: doc(goodCluster, execUser+"client-key: /k\nclient-certificate: /c\n"), opts: Options{AllowExec: true}, wantKind: errs.Invalid, wantMsg: []string{"refers to files on disk"}},

	// Refused by client-go's own validation.
	{name: "two auth methods", data: doc(goodCluster, tokenUser+"username: admin\npassword: "+marker+"\n"), wantKind: errs.Invalid, wantMsg: []string{`current context "edge" cannot be used`, "more than one authentication method"}},
	{name: "certificate without key", data: doc(goodCluster, "client-certificate-data: "+markerB64+"\n"), wantKind: errs.Invalid, wantMsg: []string{"client-key-data or client-key must be specified"}},
}

// addUser adds a user to the users of the document made by doc.
func addUser(d, name, body string) string {
	return strings.Replace(d, "contexts:\n", "- name: "+name+"\n  user:\n"+indent(body, 4)+"contexts:\n", 1)
}

// pad pads a YAML document with a comment to exactly n bytes.
func pad(s string, n int) string {
	return s + "#" + strings.Repeat("x", n-len(s)-2) + "\n"
}

func TestParse(t *testing.T) {
	for _, tt := range parseCases {
		t.Run(tt.name, func(t *testing.T) {
			k, err := Parse([]byte(tt.data), tt.opts)
			if tt.wantKind == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if k.Server() == "" || k.Context() == "" {
					t.Errorf("Server() = %q, Context() = %q", k.Server(), k.Context())
				}
				if _, err := k.RESTConfig(); err != nil {
					t.Errorf("RESTConfig: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse succeeded, want an error of kind %q", tt.wantKind)
			}
			if k != nil {
				t.Errorf("Parse returned a Kubeconfig with an error")
			}
			msg := err.Error()
			t.Logf("error: %s", msg)
			if got := errs.KindOf(err); got != tt.wantKind || !errors.Is(err, errs.E(tt.wantKind)) {
				t.Errorf("error %q has kind %q, want %q", msg, got, tt.wantKind)
			}
			for _, want := range tt.wantMsg {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			}
			if strings.Contains(msg, marker) || strings.Contains(msg, markerB64) || strings.Contains(msg, "SECRET") {
				t.Errorf("error %q contains file content", msg)
			}
			if msg != strings.ToLower(msg[:1])+msg[1:] {
				t.Errorf("error %q does not start in lower case", msg)
			}
		})
	}
}

func TestParseAccessors(t *testing.T) {
	k, err := Parse([]byte(doc(goodCluster, tokenUser)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if k.Server() != server {
		t.Errorf("Server() = %q, want %q", k.Server(), server)
	}
	if k.Context() != "edge" {
		t.Errorf("Context() = %q, want edge", k.Context())
	}
	rc, err := k.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != server {
		t.Errorf("Host = %q, want %q", rc.Host, server)
	}
	if rc.BearerToken != marker {
		t.Errorf("BearerToken not taken from the kubeconfig")
	}
	if string(rc.CAData) != "fake-ca" {
		t.Errorf("CAData not taken from the kubeconfig")
	}
}

func TestRESTConfigCertificate(t *testing.T) {
	k, err := Parse([]byte(doc(goodCluster, certUser)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := k.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if string(rc.CertData) != "fake-certificate" || string(rc.KeyData) != marker || rc.BearerToken != "" {
		t.Errorf("RESTConfig did not take the client certificate and key from the kubeconfig")
	}
	if rc.CertFile != "" || rc.KeyFile != "" || rc.CAFile != "" || rc.BearerTokenFile != "" {
		t.Errorf("RESTConfig refers to files: %q %q %q %q", rc.CertFile, rc.KeyFile, rc.CAFile, rc.BearerTokenFile)
	}
}

func TestRESTConfigIsACopy(t *testing.T) {
	k, err := Parse([]byte(doc(goodCluster, execUser)), Options{AllowExec: true})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := k.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if rc.ExecProvider == nil || rc.ExecProvider.Command != "aws" {
		t.Fatalf("ExecProvider = %+v, want command aws", rc.ExecProvider)
	}
	rc.ExecProvider.Command = "changed"
	rc.CAData[0] = 'X'
	again, err := k.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if again.ExecProvider.Command != "aws" || string(again.CAData) != "fake-ca" {
		t.Errorf("changing a RESTConfig changed the Kubeconfig")
	}
}

func TestQuote(t *testing.T) {
	long := strings.Repeat("é", 100)
	q := quote(long)
	if len(q) > maxQuoted+10 || !strings.HasSuffix(q, `"...`) {
		t.Errorf("quote of a long name = %s", q)
	}
	if got := quote("edge"); got != `"edge"` {
		t.Errorf("quote(edge) = %s", got)
	}
}

func FuzzParse(f *testing.F) {
	for _, tt := range parseCases {
		if len(tt.data) <= 64<<10 { // keep the corpus small
			f.Add([]byte(tt.data), tt.opts.AllowExec)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, allowExec bool) {
		k, err := Parse(data, Options{AllowExec: allowExec})
		if err != nil {
			if k != nil {
				t.Errorf("Parse returned a Kubeconfig with an error")
			}
			if errs.KindOf(err) == "" {
				t.Errorf("Parse error %q has no errs kind", err)
			}
			return
		}
		if k.Server() == "" || k.Context() == "" {
			t.Errorf("accepted kubeconfig has Server() %q, Context() %q", k.Server(), k.Context())
		}
		if _, err := k.RESTConfig(); err != nil {
			t.Errorf("RESTConfig of an accepted kubeconfig: %v", err)
		}
	})
}
