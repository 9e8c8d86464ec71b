package blob_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/atoll-edge/atoll/internal/blob"
	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/etcdembed"
)

func TestBlobs(t *testing.T) {
	ctx := context.Background()
	srv, err := etcdembed.Start(ctx, etcdembed.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	s := blob.New(srv.Client(), blob.Options{Root: "/t", MaxSize: 4 << 20})

	big := make([]byte, 3<<20+17) // several chunks, above etcd's 1.5 MiB request limit
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		data       []byte
		wantChunks int
	}{
		{"empty", nil, 0},
		{"small", []byte("chart"), 1},
		{"exactly one chunk", bytes.Repeat([]byte{7}, blob.DefaultChunkSize), 1},
		{"above the etcd request limit", big, 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			info, err := s.Put(ctx, bytes.NewReader(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			if info.Chunks != tc.wantChunks || info.Size != int64(len(tc.data)) || !strings.HasPrefix(info.Digest, "sha256:") {
				t.Fatalf("info = %+v", info)
			}
			again, err := s.Put(ctx, bytes.NewReader(tc.data))
			if err != nil || again != info {
				t.Fatalf("second put = %+v, %v; want the same blob", again, err)
			}
			got, err := s.Get(ctx, info.Digest)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.data) {
				t.Fatalf("content differs: %d bytes, want %d", len(got), len(tc.data))
			}
			if err := s.Delete(ctx, info.Digest); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(ctx, info.Digest); errs.KindOf(err) != errs.NotFound {
				t.Fatalf("get after delete: %v", err)
			}
		})
	}

	t.Run("over the cap", func(t *testing.T) {
		_, err := s.Put(ctx, bytes.NewReader(make([]byte, 4<<20+1)))
		if errs.KindOf(err) != errs.TooLarge {
			t.Fatalf("err = %v, want too large", err)
		}
		resp, err := srv.Client().Get(ctx, "/t/blobs/", clientv3WithPrefix()...)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count != 0 {
			t.Fatalf("%d keys left behind by a refused blob", resp.Count)
		}
	})
	t.Run("bad digest", func(t *testing.T) {
		if _, err := s.Get(ctx, "md5:abc"); errs.KindOf(err) != errs.Malformed {
			t.Fatalf("err = %v", err)
		}
	})
}

func clientv3WithPrefix() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCountOnly()}
}
