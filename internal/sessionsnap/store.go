package sessionsnap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Meta is what a snapshot's object says of it, beside its records.
type Meta struct {
	// Sequence is the last stream sequence of the KV bucket the snapshot
	// covers: it holds the bucket's contents as of that sequence, and a
	// node replays the stream from the next one.
	Sequence uint64
	// StreamCreated is when the bucket's stream was created: a bucket
	// deleted and created again has another, and its sequences mean
	// something else.
	StreamCreated time.Time
	// Taken is when the IP Mapper took the snapshot (its clock).
	Taken time.Time
	// ValidFor is how long after Taken the stream still holds every delete
	// marker written after Sequence: the IP Mapper purges markers older
	// than that. A node must not start from an older snapshot, since a
	// delete whose marker is gone would not reach it.
	ValidFor time.Duration
}

// The object's metadata keys.
const (
	metaSequence = "stream-sequence"
	metaCreated  = "stream-created"
	metaTaken    = "taken"
	metaValidFor = "valid-for"
)

// Object is the name of the snapshot object in the object store bucket
// (which is named like the KV bucket).
const Object = "snapshot"

// Put writes a snapshot of the KV bucket named bucket into the object store
// bucket of the same name (created on first use), replacing the previous
// one only once the new one is complete. fill adds the records; Put closes
// the writer.
func Put(ctx context.Context, js jetstream.JetStream, bucket string, replicas int, meta Meta, fill func(*Writer) error) (*jetstream.ObjectInfo, error) {
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      bucket,
		Description: "svc-pf: snapshots of the KV bucket of the same name, written by the IP Mapper",
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot object store %q: %w", bucket, err)
	}
	pr, pw := io.Pipe()
	go func() {
		w := NewWriter(pw)
		err := fill(w)
		if err == nil {
			err = w.Close()
		}
		_ = pw.CloseWithError(err) // nil: EOF
	}()
	info, err := obs.Put(ctx, jetstream.ObjectMeta{
		Name:        Object,
		Description: "sessions as of stream sequence " + strconv.FormatUint(meta.Sequence, 10),
		Metadata: map[string]string{
			metaSequence: strconv.FormatUint(meta.Sequence, 10),
			metaCreated:  meta.StreamCreated.UTC().Format(time.RFC3339Nano),
			metaTaken:    meta.Taken.UTC().Format(time.RFC3339Nano),
			metaValidFor: meta.ValidFor.String(),
		},
		// Larger chunks: fewer messages for the server to store and send
		// (a snapshot of millions of sessions is gigabytes).
		Opts: &jetstream.ObjectMetaOptions{ChunkSize: 512 << 10},
	}, pr)
	_ = pr.CloseWithError(errors.New("sessionsnap: put ended")) // stops fill if Put gave up
	if err != nil {
		return nil, fmt.Errorf("put snapshot: %w", err)
	}
	return info, nil
}

// Snapshot is an open snapshot: its Meta and a Reader over its records.
type Snapshot struct {
	Meta
	*Reader
	Info   *jetstream.ObjectInfo
	res    jetstream.ObjectResult
	cancel context.CancelFunc
}

// Close releases the object's subscription.
func (s *Snapshot) Close() error {
	defer s.cancel()
	return s.res.Close()
}

// A snapshot's read is bounded by its size: readBase, plus one second for
// every readFloor bytes. nats.go bounds an object's whole read by its
// context's deadline (a context without one gets its 5 s API timeout: far
// too short for gigabytes), and nothing else ends it: a snapshot replaced
// while it is read (the IP Mapper writes one every
// sessions.snapshot_interval, and the object store then removes the old
// one's chunks) never sends the rest of its chunks, and its reader waited
// for them until that deadline — an hour when it was a constant. The
// floor is far below what a loaded node reads at (1 GiB: 10 minutes); a
// read that runs out fails, and the node replays the stream instead.
const (
	readBase  = 10 * time.Second
	readFloor = 2 << 20 // bytes per second
)

// readBound is how long reading a snapshot of size bytes may take.
func readBound(size uint64) time.Duration {
	return readBase + time.Duration(size/readFloor+1)*time.Second
}

// ErrNone means there is no snapshot to start from.
var ErrNone = errors.New("sessionsnap: no snapshot")

// Open opens the newest snapshot of the KV bucket named bucket. It returns
// ErrNone when there is none. The object's integrity (its SHA-256 digest)
// is checked as its end is read: Reader.Next fails then rather than
// returning io.EOF.
func Open(ctx context.Context, js jetstream.JetStream, bucket string) (snap *Snapshot, err error) {
	obs, err := js.ObjectStore(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNone
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot object store %q: %w", bucket, err)
	}
	head, err := obs.GetInfo(ctx, Object)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, ErrNone
	}
	if err != nil {
		return nil, fmt.Errorf("open snapshot: %w", err)
	}
	// Sized by the object as it is now: one replaced in between is
	// another size, and its read ends at this bound or reads through.
	ctx, cancel := context.WithTimeout(ctx, readBound(head.Size))
	defer func() {
		if snap == nil {
			cancel()
		}
	}()
	res, err := obs.Get(ctx, Object)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, ErrNone
	}
	if err != nil {
		return nil, fmt.Errorf("open snapshot: %w", err)
	}
	info, err := res.Info()
	if err == nil {
		var m Meta
		m, err = parseMeta(info.Metadata)
		if err == nil {
			var r *Reader
			if r, err = NewReader(res); err == nil {
				return &Snapshot{Meta: m, Reader: r, Info: info, res: res, cancel: cancel}, nil
			}
		}
	}
	_ = res.Close()
	return nil, fmt.Errorf("open snapshot: %w", err)
}

func parseMeta(md map[string]string) (Meta, error) {
	var m Meta
	var err error
	if m.Sequence, err = strconv.ParseUint(md[metaSequence], 10, 64); err != nil {
		return m, fmt.Errorf("%w: %s: %w", ErrFormat, metaSequence, err)
	}
	if m.StreamCreated, err = time.Parse(time.RFC3339Nano, md[metaCreated]); err != nil {
		return m, fmt.Errorf("%w: %s: %w", ErrFormat, metaCreated, err)
	}
	if m.Taken, err = time.Parse(time.RFC3339Nano, md[metaTaken]); err != nil {
		return m, fmt.Errorf("%w: %s: %w", ErrFormat, metaTaken, err)
	}
	if m.ValidFor, err = time.ParseDuration(md[metaValidFor]); err != nil {
		return m, fmt.Errorf("%w: %s: %w", ErrFormat, metaValidFor, err)
	}
	return m, nil
}
