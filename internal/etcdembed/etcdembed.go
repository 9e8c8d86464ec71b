// Package etcdembed runs a single-member etcd inside the hub process, so that
// `atoll serve` needs no other service. The hub talks to it through an in-process
// client; its peer and client ports listen on loopback only.
package etcdembed

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Options configure the embedded etcd.
type Options struct {
	// Dir holds etcd's data (its WAL and snapshots); created 0700 when missing.
	Dir string
	// MaxRequestBytes caps one etcd request; 0 means etcd's default (1.5 MiB).
	MaxRequestBytes uint
	// QuotaBackendBytes caps the database size; 0 means 8 GiB.
	QuotaBackendBytes int64
	// StartTimeout bounds the wait until etcd serves; 0 means one minute.
	StartTimeout time.Duration
}

// Server is a running embedded etcd.
type Server struct {
	etcd   *embed.Etcd
	client *clientv3.Client
}

// Start starts etcd in opts.Dir and waits until it serves. A data dir written by an
// earlier run is reopened with everything in it.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("etcd data dir is empty")
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create etcd data dir: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "atoll"
	cfg.Dir = filepath.Join(opts.Dir, "member-data")
	peer, err := loopbackURL()
	if err != nil {
		return nil, err
	}
	client, err := loopbackURL()
	if err != nil {
		return nil, err
	}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.MaxRequestBytes = embed.DefaultMaxRequestBytes
	if opts.MaxRequestBytes > 0 {
		cfg.MaxRequestBytes = opts.MaxRequestBytes
	}
	cfg.QuotaBackendBytes = 8 << 30
	if opts.QuotaBackendBytes > 0 {
		cfg.QuotaBackendBytes = opts.QuotaBackendBytes
	}
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "1h"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(quietLogger())

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd in %s: %w", opts.Dir, err)
	}
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = time.Minute
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd failed while starting: %w", err)
	case <-time.After(timeout):
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s did not become ready within %s", opts.Dir, timeout)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	return &Server{etcd: e, client: v3client.New(e.Server)}, nil
}

// Client is an in-process client of the embedded etcd.
func (s *Server) Client() *clientv3.Client { return s.client }

// Endpoint is the loopback URL where the embedded etcd also serves clients.
func (s *Server) Endpoint() string { return s.etcd.Clients[0].Addr().String() }

// Err reports a failure of the running etcd.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops etcd after its in-flight requests; the data stays in the dir.
func (s *Server) Close() {
	s.client.Close()
	s.etcd.Close()
}

func loopbackURL() (url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, fmt.Errorf("find a free loopback port for etcd: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	return url.URL{Scheme: "http", Host: addr}, nil
}

// quietLogger logs etcd's warnings and errors as JSON on stderr, without the
// errors every embedded etcd prints while it is closing.
func quietLogger() *zap.Logger {
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	core := zapcore.NewCore(enc, zapcore.Lock(os.Stderr), zapcore.WarnLevel)
	return zap.New(closingFilter{core}).With(zap.String("component", "etcd"))
}

type closingFilter struct{ zapcore.Core }

// ignored are messages that say nothing to a hub operator: errors every embedded
// etcd prints while closing, and warnings about a setup that is on purpose (one
// loopback port for HTTP and gRPC; simple tokens, auth being off).
var ignored = map[string]bool{
	"setting up serving from embedded etcd failed.":                                        true,
	"Running http and grpc server on single port. This is not recommended for production.": true,
	"simple token is not cryptographically signed":                                         true,
}

func (f closingFilter) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if ignored[e.Message] {
		return ce
	}
	return f.Core.Check(e, ce)
}

func (f closingFilter) With(fields []zapcore.Field) zapcore.Core {
	return closingFilter{f.Core.With(fields)}
}
