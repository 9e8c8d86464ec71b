// Package client is a Go client of the Atoll hub's REST API, used by the CLI and
// the tests.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
)

// Client talks to one hub.
type Client struct {
	// BaseURL is the hub's address, for example http://127.0.0.1:9015.
	BaseURL string
	// HTTP is the HTTP client; nil means http.DefaultClient.
	HTTP *http.Client
}

// New returns a client of the hub at baseURL.
func New(baseURL string) *Client { return &Client{BaseURL: strings.TrimSuffix(baseURL, "/")} }

// Error is an error answer of the API.
type Error struct {
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Code, e.Reason, e.Message) }

// Metadata is the common header of API objects.
type Metadata struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	UserData1   string `json:"userData1,omitempty"`
	UserData2   string `json:"userData2,omitempty"`
}

// Object is an API object with metadata and an optional spec.
type Object struct {
	Metadata Metadata        `json:"metadata"`
	Spec     json.RawMessage `json:"spec,omitempty"`
}

// Capacity is the sum of a cluster's node allocatable resources.
type Capacity struct {
	Nodes  int    `json:"nodes"`
	CPU    string `json:"cpu"`
	Memory string `json:"memory"`
	Pods   int64  `json:"pods"`
}

// ClusterStatus is the connectivity of a cluster.
type ClusterStatus struct {
	Metadata          Metadata `json:"metadata"`
	State             string   `json:"state"`
	Reachable         bool     `json:"reachable"`
	Server            string   `json:"server"`
	KubernetesVersion string   `json:"kubernetesVersion"`
	LastError         string   `json:"lastError"`
	Since             string   `json:"since"`
	LastProbe         string   `json:"lastProbe"`
	Failures          int      `json:"consecutiveFailures"`
	Capacity          Capacity `json:"capacity"`
}

// Do sends a JSON request (body nil for none) and decodes a 2xx answer into out
// (nil to discard). A non-2xx answer is returned as *Error.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	return c.send(req, out)
}

func (c *Client) send(req *http.Request, out any) error {
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read answer of %s %s: %w", req.Method, req.URL.Path, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &Error{Code: resp.StatusCode}
		if json.Unmarshal(data, e) != nil || e.Message == "" {
			e.Message = strings.TrimSpace(string(data))
		}
		return e
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decode answer of %s %s: %w", req.Method, req.URL.Path, err)
		}
	}
	return nil
}

// Multipart sends metadata (marshalled to JSON) and file the way emcoctl does:
// a plain "metadata" field and a "file" part named "filename".
func (c *Client) Multipart(ctx context.Context, method, path string, metadata any, file []byte, out any) error {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	meta, err := json.Marshal(metadata)
	if err != nil {
		return fmt.Errorf("encode metadata: %w", err)
	}
	if err := mw.WriteField("metadata", string(meta)); err != nil {
		return err
	}
	if file != nil {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="file"; filename="filename"`)
		h.Set("Content-Type", "application/octet-stream")
		fw, err := mw.CreatePart(h)
		if err != nil {
			return err
		}
		if _, err := fw.Write(file); err != nil {
			return err
		}
	}
	if err := mw.Close(); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, &buf)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return c.send(req, out)
}

// CreateProject creates a project.
func (c *Client) CreateProject(ctx context.Context, name string) error {
	return c.Do(ctx, "POST", "/v2/projects", Object{Metadata: Metadata{Name: name}}, nil)
}

// CreateClusterProvider creates a cluster provider.
func (c *Client) CreateClusterProvider(ctx context.Context, name string) error {
	return c.Do(ctx, "POST", "/v2/cluster-providers", Object{Metadata: Metadata{Name: name}}, nil)
}

// RegisterCluster registers a cluster with its kubeconfig and adds labels to it.
func (c *Client) RegisterCluster(ctx context.Context, provider, name string, kubeconfig []byte, labels ...string) error {
	base := "/v2/cluster-providers/" + url.PathEscape(provider) + "/clusters"
	if err := c.Multipart(ctx, "POST", base, Object{Metadata: Metadata{Name: name}}, kubeconfig, nil); err != nil {
		return err
	}
	for _, l := range labels {
		body := map[string]any{"metadata": Metadata{}, "clusterLabel": l}
		if err := c.Do(ctx, "POST", base+"/"+url.PathEscape(name)+"/labels", body, nil); err != nil {
			return err
		}
	}
	return nil
}

// ClustersWithLabel returns the names of provider's clusters labelled label.
func (c *Client) ClustersWithLabel(ctx context.Context, provider, label string) ([]string, error) {
	var names []string
	err := c.Do(ctx, "GET", "/v2/cluster-providers/"+url.PathEscape(provider)+"/clusters?label="+url.QueryEscape(label), nil, &names)
	return names, err
}

// ClusterStatus returns a cluster's connectivity.
func (c *Client) ClusterStatus(ctx context.Context, provider, name string) (ClusterStatus, error) {
	var st ClusterStatus
	err := c.Do(ctx, "GET", "/v2/cluster-providers/"+url.PathEscape(provider)+"/clusters/"+url.PathEscape(name)+"/status", nil, &st)
	return st, err
}
