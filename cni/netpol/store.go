package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// store is the mirror's side of etcd: every key it reads or writes is
// below root ({prefix}/k8s/), the only keys its etcd role may write.
type store struct {
	kv   clientv3.KV
	root string
	// A resync's changes go in transactions of at most maxOps operations
	// (etcd's --max-txn-ops is 128 by default) and about maxBytes of keys
	// and values (its request limit is 1.5 MiB).
	maxOps, maxBytes int
	// timeout: one etcd call's.
	timeout time.Duration
}

// change is a key to write (value) or to delete (value nil), relative to
// root.
type change struct {
	rel   string
	value []byte
}

func newStore(kv clientv3.KV, prefix string) *store {
	return &store{kv: kv, root: strings.TrimSuffix(prefix, "/") + "/k8s/", maxOps: 100, maxBytes: 1 << 20,
		timeout: 10 * time.Second}
}

// key is rel's full key, refused unless it stays below root: the mirror
// never writes anywhere else.
func (s *store) key(rel string) (string, error) {
	if rel == "" || strings.HasPrefix(rel, "/") || strings.Contains(rel, "//") {
		return "", fmt.Errorf("key %q: not a key below %s", rel, s.root)
	}
	for _, part := range strings.Split(rel, "/") {
		if part == "." || part == ".." {
			return "", fmt.Errorf("key %q: not a key below %s", rel, s.root)
		}
	}
	return s.root + rel, nil
}

func (s *store) op(c change) (clientv3.Op, error) {
	key, err := s.key(c.rel)
	if err != nil {
		return clientv3.Op{}, err
	}
	if c.value == nil {
		return clientv3.OpDelete(key), nil
	}
	return clientv3.OpPut(key, string(c.value)), nil
}

// write applies one change.
func (s *store) write(ctx context.Context, c change) error {
	op, err := s.op(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if _, err := s.kv.Do(ctx, op); err != nil {
		return fmt.Errorf("etcd: %s %s: %w", verb(c), s.root+c.rel, err)
	}
	return nil
}

func verb(c change) string {
	if c.value == nil {
		return "deleting"
	}
	return "writing"
}

// list reads every key below root, a page at a time, as rel -> value.
func (s *store) list(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	end := clientv3.GetPrefixRangeEnd(s.root)
	from := s.root
	for {
		cctx, cancel := context.WithTimeout(ctx, s.timeout)
		resp, err := s.kv.Get(cctx, from, clientv3.WithRange(end), clientv3.WithLimit(1000),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("etcd: reading %s: %w", s.root, err)
		}
		for _, kv := range resp.Kvs {
			out[strings.TrimPrefix(string(kv.Key), s.root)] = string(kv.Value)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// batches cuts changes into transactions within maxOps and maxBytes (a
// change larger than maxBytes alone).
func (s *store) batches(changes []change) [][]change {
	var out [][]change
	var cur []change
	size := 0
	for _, c := range changes {
		n := len(s.root) + len(c.rel) + len(c.value)
		if len(cur) > 0 && (len(cur) >= s.maxOps || size+n > s.maxBytes) {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, c)
		size += n
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// apply writes changes, one etcd transaction per batch. Returns how many
// transactions it committed; on an error, the batches before it are in
// etcd and the rest are not.
func (s *store) apply(ctx context.Context, changes []change) (int, error) {
	done := 0
	for _, b := range s.batches(changes) {
		ops := make([]clientv3.Op, 0, len(b))
		for _, c := range b {
			op, err := s.op(c)
			if err != nil {
				return done, err
			}
			ops = append(ops, op)
		}
		cctx, cancel := context.WithTimeout(ctx, s.timeout)
		_, err := s.kv.Txn(cctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return done, fmt.Errorf("etcd: a transaction of %d changes below %s: %w", len(ops), s.root, err)
		}
		done++
	}
	return done, nil
}
