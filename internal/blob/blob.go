// Package blob is a content-addressed store of large byte strings (Helm charts,
// profile archives) in etcd. A blob is named by the SHA-256 of its content, cut into
// chunks that stay below etcd's request-size limit, and becomes visible only when
// its last chunk is written: a crash in the middle leaves no half blob.
package blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/atoll-edge/atoll/internal/errs"
)

// DefaultMaxSize is the default cap on one blob (64 MiB).
const DefaultMaxSize = 64 << 20

// DefaultChunkSize keeps one etcd request well below etcd's default 1.5 MiB limit.
const DefaultChunkSize = 512 << 10

// Store keeps blobs under a root prefix of an etcd keyspace.
type Store struct {
	cli       *clientv3.Client
	root      string
	maxSize   int64
	chunkSize int
}

// Options configure a Store.
type Options struct {
	Root      string // key prefix, for example "/atoll"
	MaxSize   int64  // cap on one blob; 0 means DefaultMaxSize
	ChunkSize int    // bytes per etcd value; 0 means DefaultChunkSize
}

// New returns a blob store on cli.
func New(cli *clientv3.Client, opts Options) *Store {
	s := &Store{cli: cli, root: strings.TrimSuffix(opts.Root, "/") + "/blobs/", maxSize: opts.MaxSize, chunkSize: opts.ChunkSize}
	if s.maxSize <= 0 {
		s.maxSize = DefaultMaxSize
	}
	if s.chunkSize <= 0 {
		s.chunkSize = DefaultChunkSize
	}
	return s
}

// MaxSize is the cap on one blob.
func (s *Store) MaxSize() int64 { return s.maxSize }

// Info describes a stored blob.
type Info struct {
	Digest string `json:"digest"` // "sha256:<hex>"
	Size   int64  `json:"size"`
	Chunks int    `json:"chunks"`
}

func (s *Store) metaKey(hexsum string) string { return s.root + hexsum + "/meta" }
func (s *Store) chunkKey(hexsum string, i int) string {
	return fmt.Sprintf("%s%s/c/%08d", s.root, hexsum, i)
}

// Put reads r to its end and stores its content, returning its digest. Storing the
// same content twice stores it once. Content over the cap is refused (errs.TooLarge)
// and nothing is written.
func (s *Store) Put(ctx context.Context, r io.Reader) (Info, error) {
	data, err := io.ReadAll(io.LimitReader(r, s.maxSize+1))
	if err != nil {
		return Info{}, fmt.Errorf("read blob: %w", err)
	}
	if int64(len(data)) > s.maxSize {
		return Info{}, errs.New(errs.TooLarge, "the file is larger than the limit of %d bytes", s.maxSize)
	}
	sum := sha256.Sum256(data)
	hexsum := hex.EncodeToString(sum[:])
	info := Info{Digest: "sha256:" + hexsum, Size: int64(len(data)), Chunks: (len(data) + s.chunkSize - 1) / s.chunkSize}
	if existing, err := s.Stat(ctx, info.Digest); err == nil {
		return existing, nil
	} else if errs.KindOf(err) != errs.NotFound {
		return Info{}, err
	}
	for i := 0; i < info.Chunks; i++ {
		end := min((i+1)*s.chunkSize, len(data))
		if _, err := s.cli.Put(ctx, s.chunkKey(hexsum, i), string(data[i*s.chunkSize:end])); err != nil {
			return Info{}, errs.Wrap(errs.Unavailable, err, "store blob chunk %d of %d", i+1, info.Chunks)
		}
	}
	meta, err := json.Marshal(info)
	if err != nil {
		return Info{}, fmt.Errorf("encode blob info: %w", err)
	}
	if _, err := s.cli.Put(ctx, s.metaKey(hexsum), string(meta)); err != nil {
		return Info{}, errs.Wrap(errs.Unavailable, err, "store blob info")
	}
	return info, nil
}

func parseDigest(d string) (string, error) {
	hexsum, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hexsum) != 64 {
		return "", errs.New(errs.Malformed, "blob digest %q is not of the form sha256:<64 hex digits>", d)
	}
	if _, err := hex.DecodeString(hexsum); err != nil {
		return "", errs.New(errs.Malformed, "blob digest %q is not of the form sha256:<64 hex digits>", d)
	}
	return hexsum, nil
}

// Stat returns the blob's info, or an errs.NotFound error.
func (s *Store) Stat(ctx context.Context, digest string) (Info, error) {
	hexsum, err := parseDigest(digest)
	if err != nil {
		return Info{}, err
	}
	resp, err := s.cli.Get(ctx, s.metaKey(hexsum))
	if err != nil {
		return Info{}, errs.Wrap(errs.Unavailable, err, "read blob info")
	}
	if len(resp.Kvs) == 0 {
		return Info{}, errs.New(errs.NotFound, "blob %s does not exist", digest)
	}
	var info Info
	if err := json.Unmarshal(resp.Kvs[0].Value, &info); err != nil {
		return Info{}, fmt.Errorf("decode blob info of %s: %w", digest, err)
	}
	return info, nil
}

// Get returns the blob's content, checked against its digest.
func (s *Store) Get(ctx context.Context, digest string) ([]byte, error) {
	info, err := s.Stat(ctx, digest)
	if err != nil {
		return nil, err
	}
	hexsum, _ := parseDigest(digest)
	var buf bytes.Buffer
	buf.Grow(int(info.Size))
	for i := 0; i < info.Chunks; i++ {
		resp, err := s.cli.Get(ctx, s.chunkKey(hexsum, i))
		if err != nil {
			return nil, errs.Wrap(errs.Unavailable, err, "read blob chunk %d of %d", i+1, info.Chunks)
		}
		if len(resp.Kvs) == 0 {
			return nil, fmt.Errorf("blob %s is missing chunk %d of %d", digest, i+1, info.Chunks)
		}
		buf.Write(resp.Kvs[0].Value)
	}
	sum := sha256.Sum256(buf.Bytes())
	if hex.EncodeToString(sum[:]) != hexsum || int64(buf.Len()) != info.Size {
		return nil, fmt.Errorf("blob %s is corrupt: its content does not match its digest", digest)
	}
	return buf.Bytes(), nil
}

// Delete removes the blob: its info first, so a reader never sees it half gone.
func (s *Store) Delete(ctx context.Context, digest string) error {
	hexsum, err := parseDigest(digest)
	if err != nil {
		return err
	}
	if _, err := s.cli.Delete(ctx, s.metaKey(hexsum)); err != nil {
		return errs.Wrap(errs.Unavailable, err, "delete blob info")
	}
	if _, err := s.cli.Delete(ctx, s.root+hexsum+"/c/", clientv3.WithPrefix()); err != nil {
		return errs.Wrap(errs.Unavailable, err, "delete blob chunks")
	}
	return nil
}
