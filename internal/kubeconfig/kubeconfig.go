// Package kubeconfig checks a kubeconfig uploaded to the hub and turns it into
// a client configuration, in memory: the kubeconfig is never written to disk.
//
// A kubeconfig comes from outside the hub, so Parse refuses what would make
// the hub act on the uploader's behalf beyond talking to the cluster: exec and
// auth-provider plugins (unless Options.AllowExec) and references to files on
// the hub's disk. These checks cover every user and cluster in the file, not
// only those of the current context, since the context can be switched.
//
// Errors are of a kind from package errs and never contain credentials or
// other content of the file: names of users, clusters and contexts, and the
// command of an exec plugin, are the only values they quote.
package kubeconfig

import (
	"bytes"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/atoll-edge/atoll/internal/errs"
)

// MaxSize is the largest kubeconfig Parse accepts, in bytes (1 MiB).
const MaxSize = 1 << 20

// Options says what Parse accepts beyond a kubeconfig with embedded
// credentials.
type Options struct {
	// AllowExec accepts users with an exec or auth-provider plugin. Such
	// plugins run programs or code on the hub, so they are refused unless
	// the hub was started with --allow-kubeconfig-exec.
	AllowExec bool
}

// Kubeconfig is a kubeconfig that passed the checks of Parse. Its methods
// use the file's current context.
type Kubeconfig struct {
	cfg *clientcmdapi.Config
}

// Parse parses and checks a kubeconfig, in YAML or JSON. The file must be
// non-empty and at most MaxSize bytes; its current context must name a
// context whose cluster has an absolute http or https server URL and whose
// user exists. No user or cluster in the file may refer to files on disk,
// nor, unless opts.AllowExec, use an exec or auth-provider plugin.
//
// Errors are of kind errs.Malformed (empty, or cannot be parsed),
// errs.TooLarge, or errs.Invalid (parsed but refused).
func Parse(data []byte, opts Options) (*Kubeconfig, error) {
	if len(data) > MaxSize {
		return nil, errs.New(errs.TooLarge, "the kubeconfig file is %d bytes, more than the limit of 1 MiB (%d bytes)", len(data), MaxSize)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errs.New(errs.Malformed, "the kubeconfig file is empty")
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		// The parser's messages can quote the file, credentials included,
		// so the cause is replaced by a description of it; see loadError.
		return nil, loadError(err)
	}
	if err := checkUsers(cfg, opts); err != nil {
		return nil, err
	}
	if err := checkClusters(cfg); err != nil {
		return nil, err
	}
	if err := checkCurrent(cfg); err != nil {
		return nil, err
	}
	k := &Kubeconfig{cfg: cfg}
	// Whatever else client-go would refuse later is refused now.
	if _, err := k.RESTConfig(); err != nil {
		return nil, err
	}
	return k, nil
}

// Context returns the name of the kubeconfig's current context.
func (k *Kubeconfig) Context() string { return k.cfg.CurrentContext }

// Server returns the server URL of the current context's cluster.
func (k *Kubeconfig) Server() string {
	ctx := k.cfg.Contexts[k.cfg.CurrentContext]
	if ctx == nil {
		return ""
	}
	if c := k.cfg.Clusters[ctx.Cluster]; c != nil {
		return c.Server
	}
	return ""
}

// RESTConfig returns a client configuration for the current context. Each
// call returns a new value that shares nothing with the Kubeconfig. Note that
// client-go sends credentials only to an https server. The error, of kind
// errs.Invalid, does not occur for a Kubeconfig returned by Parse.
func (k *Kubeconfig) RESTConfig() (*rest.Config, error) {
	cfg := k.cfg.DeepCopy()
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, errs.Wrap(errs.Invalid, redact(err, k.cfg), "the kubeconfig's current context %s cannot be used", quote(k.cfg.CurrentContext))
	}
	return rc, nil
}

// checkUsers refuses plugins (unless allowed) and file references in every
// user of cfg.
func checkUsers(cfg *clientcmdapi.Config, opts Options) error {
	for _, name := range sortedKeys(cfg.AuthInfos) {
		u := cfg.AuthInfos[name]
		if u == nil {
			continue
		}
		if u.Exec != nil && !opts.AllowExec {
			return errs.New(errs.Invalid, "user %s gets credentials from the exec plugin %s; exec plugins run programs on the hub and are refused: embed a token or a client certificate and key instead, or start the hub with --allow-kubeconfig-exec to accept them", quote(name), quote(u.Exec.Command))
		}
		if u.AuthProvider != nil && !opts.AllowExec {
			return errs.New(errs.Invalid, "user %s gets credentials from the auth-provider plugin %s; auth-provider plugins run on the hub and are refused: embed a token or a client certificate and key instead, or start the hub with --allow-kubeconfig-exec to accept them", quote(name), quote(u.AuthProvider.Name))
		}
		var files, embed []string
		if u.ClientCertificate != "" {
			files, embed = append(files, "client-certificate"), append(embed, "client-certificate-data")
		}
		if u.ClientKey != "" {
			files, embed = append(files, "client-key"), append(embed, "client-key-data")
		}
		if u.TokenFile != "" {
			files, embed = append(files, "tokenFile"), append(embed, "token")
		}
		if len(files) > 0 {
			return errs.New(errs.Invalid, "user %s refers to files on disk (%s), which the hub does not read: embed their content in the kubeconfig as %s instead (*-data fields base64-encoded, e.g. `kubectl config view --flatten --minify`)", quote(name), strings.Join(files, ", "), strings.Join(embed, ", "))
		}
	}
	return nil
}

// checkClusters refuses file references in every cluster of cfg.
func checkClusters(cfg *clientcmdapi.Config) error {
	for _, name := range sortedKeys(cfg.Clusters) {
		c := cfg.Clusters[name]
		if c != nil && c.CertificateAuthority != "" {
			return errs.New(errs.Invalid, "cluster %s refers to a file on disk (certificate-authority), which the hub does not read: embed its content in the kubeconfig, base64-encoded, as certificate-authority-data instead (e.g. `kubectl config view --flatten --minify`)", quote(name))
		}
	}
	return nil
}

// checkCurrent checks the current context and its cluster and user.
func checkCurrent(cfg *clientcmdapi.Config) error {
	if cfg.CurrentContext == "" {
		return errs.New(errs.Invalid, "the kubeconfig has no current-context: set current-context to the name of the context the hub should use")
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil {
		return errs.New(errs.Invalid, "the kubeconfig's current-context %s names no context in contexts: set it to one of the contexts' names", quote(cfg.CurrentContext))
	}
	if ctx.Cluster == "" {
		return errs.New(errs.Invalid, "context %s has no cluster: set its cluster to the name of one of the clusters", quote(cfg.CurrentContext))
	}
	c := cfg.Clusters[ctx.Cluster]
	if c == nil {
		return errs.New(errs.Invalid, "context %s names cluster %s, which is not in clusters: add it or correct the name", quote(cfg.CurrentContext), quote(ctx.Cluster))
	}
	if ctx.AuthInfo == "" {
		return errs.New(errs.Invalid, "context %s has no user: set its user to the name of one of the users", quote(cfg.CurrentContext))
	}
	if cfg.AuthInfos[ctx.AuthInfo] == nil {
		return errs.New(errs.Invalid, "context %s names user %s, which is not in users: add it or correct the name", quote(cfg.CurrentContext), quote(ctx.AuthInfo))
	}
	return checkCluster(ctx.Cluster, c)
}

// checkCluster checks the URLs of a cluster. The messages do not quote the
// URLs, which may hold a user name and password.
func checkCluster(name string, c *clientcmdapi.Cluster) error {
	if c.Server == "" {
		return errs.New(errs.Invalid, "cluster %s has no server: set server to the URL of the cluster's API server, e.g. https://host:6443", quote(name))
	}
	u, err := url.Parse(c.Server)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Opaque != "" {
		return errs.New(errs.Invalid, "cluster %s has a server that is not an absolute http or https URL with a host: set server to the URL of the cluster's API server, e.g. https://host:6443", quote(name))
	}
	if u.User != nil {
		return errs.New(errs.Invalid, "cluster %s has a server URL with a user name or password in it: remove them from the URL and give credentials in the user", quote(name))
	}
	if c.ProxyURL != "" {
		p, err := url.Parse(c.ProxyURL)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https" && p.Scheme != "socks5") || p.Host == "" {
			return errs.New(errs.Invalid, "cluster %s has a proxy-url that is not an absolute http, https or socks5 URL with a host: correct it or remove it", quote(name))
		}
	}
	return nil
}

// maxQuoted is how many bytes of a name an error message quotes.
const maxQuoted = 64

// quote quotes a name for an error message, shortened if it is long.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// minRedacted is the length below which a credential is not looked for in an
// error message: shorter strings match ordinary words.
const minRedacted = 3

// withheld replaces a cause whose message may contain credentials.
type withheld struct{}

func (withheld) Error() string {
	return "details withheld because they would show credentials"
}

// redact returns err, or a placeholder if err's message contains any
// credential, URL or embedded data of cfg. client-go's validation messages
// quote names and, for some mistakes, values; Parse checks those values
// first, so this is a second line of defence.
func redact(err error, cfg *clientcmdapi.Config) error {
	msg := err.Error()
	leaks := func(s string) bool { return len(s) >= minRedacted && strings.Contains(msg, s) }
	leaksData := func(b []byte) bool {
		return len(b) > 0 && (leaks(string(b)) || leaks(fmt.Sprint(b)) || leaks(encodeBase64(b)))
	}
	for _, u := range cfg.AuthInfos {
		if u == nil {
			continue
		}
		if leaks(u.Token) || leaks(u.Password) || leaksData(u.ClientCertificateData) || leaksData(u.ClientKeyData) {
			return withheld{}
		}
		if u.Exec != nil {
			for _, a := range u.Exec.Args {
				if leaks(a) {
					return withheld{}
				}
			}
			for _, e := range u.Exec.Env {
				if leaks(e.Value) {
					return withheld{}
				}
			}
		}
		if u.AuthProvider != nil {
			for _, v := range u.AuthProvider.Config {
				if leaks(v) {
					return withheld{}
				}
			}
		}
	}
	for _, c := range cfg.Clusters {
		if c != nil && (leaks(c.Server) || leaks(c.ProxyURL) || leaksData(c.CertificateAuthorityData)) {
			return withheld{}
		}
	}
	return err
}
