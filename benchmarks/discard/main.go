// discard: a loopback stand-in for Azure Blob Storage that accepts every upload and keeps
// nothing, so a client's own upload ceiling can be measured without a real server's limits.
//
// It answers just enough of the Blob REST API for an uploader to believe it succeeded:
//
//	GET  ...?comp=blocklist             404 BlobNotFound (no upload to resume)
//	HEAD/GET a blob                     404 BlobNotFound, unless committed here (then its size)
//	GET  ?restype=container&comp=list   an empty EnumerationResults
//	PUT  ?comp=block                    201, body read and dropped
//	PUT  ?comp=blocklist                201
//	PUT  a blob, PUT a container        201
//	DELETE                              202
//	GET  /__stats                       JSON counters, for the harness to check what arrived
//	POST /__reset                       forget committed blobs (a fresh server for the next run)
//
// Committed blob sizes are remembered (only the number) because some clients read a blob's
// properties back after committing it and treat a 404 there as a failed upload.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type counters struct {
	BodyBytes atomic.Int64
	Requests  atomic.Int64
	Blocks    atomic.Int64
	Commits   atomic.Int64
	Puts      atomic.Int64
}

type server struct {
	stats counters
	// Pending block sizes per blob so that a commit can record the blob's length.
	mu      sync.Mutex
	pending map[string]map[string]int64
	blobs   map[string]int64
	bufs    sync.Pool
}

// A large read buffer lets net/http hand the socket data straight to us instead of through
// its 4 KiB bufio layer; the default io.Discard path reads in 8 KiB pieces.
const readBuf = 1 << 20

func (s *server) drain(r *http.Request) int64 {
	bp := s.bufs.Get().(*[]byte)
	defer s.bufs.Put(bp)
	buf := *bp
	var n int64
	for {
		k, err := r.Body.Read(buf)
		n += int64(k)
		if err != nil {
			break
		}
	}
	s.stats.BodyBytes.Add(n)
	return n
}

func header(w http.ResponseWriter) {
	h := w.Header()
	h.Set("x-ms-request-id", "00000000-0000-0000-0000-000000000000")
	h.Set("x-ms-version", "2025-11-05")
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
}

func notFound(w http.ResponseWriter, r *http.Request, code string) {
	header(w)
	w.Header().Set("x-ms-error-code", code)
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusNotFound)
	if r.Method != http.MethodHead {
		fmt.Fprintf(w, `<?xml version="1.0" encoding="utf-8"?><Error><Code>%s</Code><Message>discard server keeps nothing</Message></Error>`, code)
	}
}

func created(w http.ResponseWriter, r *http.Request) {
	header(w)
	h := w.Header()
	h.Set("ETag", `"0x8DC0000000000000"`)
	h.Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
	h.Set("x-ms-request-server-encrypted", "true")
	if md5 := r.Header.Get("Content-MD5"); md5 != "" {
		h.Set("Content-MD5", md5)
	}
	w.WriteHeader(http.StatusCreated)
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.stats.Requests.Add(1)
	if r.URL.Path == "/__stats" {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]int64{
			"body_bytes": s.stats.BodyBytes.Load(),
			"requests":   s.stats.Requests.Load(),
			"blocks":     s.stats.Blocks.Load(),
			"commits":    s.stats.Commits.Load(),
			"puts":       s.stats.Puts.Load(),
		})
		return
	}
	if r.URL.Path == "/__reset" {
		s.mu.Lock()
		s.pending = map[string]map[string]int64{}
		s.blobs = map[string]int64{}
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	q := r.URL.Query()
	comp, restype := q.Get("comp"), q.Get("restype")
	key := r.URL.Path
	switch r.Method {
	case http.MethodPut:
		switch {
		case comp == "block":
			n := s.drain(r)
			s.stats.Blocks.Add(1)
			s.mu.Lock()
			if s.pending[key] == nil {
				s.pending[key] = map[string]int64{}
			}
			s.pending[key][q.Get("blockid")] = n
			s.mu.Unlock()
			created(w, r)
		case comp == "blocklist":
			body, _ := io.ReadAll(r.Body)
			s.stats.Commits.Add(1)
			s.mu.Lock()
			var size int64
			for id, n := range s.pending[key] {
				// Block IDs appear verbatim inside <Latest>/<Uncommitted>/<Committed> elements.
				if strings.Contains(string(body), ">"+id+"<") {
					size += n
				}
			}
			delete(s.pending, key)
			s.blobs[key] = size
			s.mu.Unlock()
			created(w, r)
		case restype == "container" || comp != "":
			s.drain(r)
			created(w, r)
		default:
			n := s.drain(r)
			s.stats.Puts.Add(1)
			s.mu.Lock()
			s.blobs[key] = n
			s.mu.Unlock()
			created(w, r)
		}
	case http.MethodGet, http.MethodHead:
		switch {
		case restype == "container" && comp == "list":
			header(w)
			w.Header().Set("Content-Type", "application/xml")
			fmt.Fprintf(w, `<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="http://%s/" ContainerName="%s"><Prefix>%s</Prefix><Blobs /><NextMarker /></EnumerationResults>`,
				r.Host, containerOf(key), q.Get("prefix"))
		case restype == "container":
			header(w)
			w.WriteHeader(http.StatusOK)
		case comp == "blocklist":
			notFound(w, r, "BlobNotFound")
		case comp == "":
			s.mu.Lock()
			size, ok := s.blobs[key]
			s.mu.Unlock()
			if !ok {
				notFound(w, r, "BlobNotFound")
				return
			}
			header(w)
			h := w.Header()
			h.Set("Content-Length", strconv.FormatInt(size, 10))
			h.Set("x-ms-blob-type", "BlockBlob")
			h.Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
			h.Set("ETag", `"0x8DC0000000000000"`)
			// There are no bytes to send back; a GET of a committed blob is answered as a HEAD.
			w.WriteHeader(http.StatusOK)
		default:
			notFound(w, r, "BlobNotFound")
		}
	case http.MethodDelete:
		s.mu.Lock()
		delete(s.blobs, key)
		s.mu.Unlock()
		header(w)
		w.WriteHeader(http.StatusAccepted)
	default:
		header(w)
		w.WriteHeader(http.StatusBadRequest)
	}
}

// containerOf takes the container from a path-style URL: /<account>/<container>/...
func containerOf(path string) string {
	parts := strings.SplitN(strings.TrimPrefix(path, "/"), "/", 3)
	if len(parts) >= 2 {
		return parts[1]
	}
	return ""
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback only)")
	flag.Parse()
	host, _, err := net.SplitHostPort(*addr)
	if err != nil || (host != "127.0.0.1" && host != "localhost" && host != "::1") {
		log.Fatalf("discard: refusing to listen on %q: loopback only", *addr)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	s := &server{pending: map[string]map[string]int64{}, blobs: map[string]int64{}}
	s.bufs.New = func() any { b := make([]byte, readBuf); return &b }
	// The harness reads the chosen port from this first line.
	fmt.Fprintf(os.Stdout, "listening %s\n", ln.Addr())
	os.Stdout.Sync()
	log.Fatal((&http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second}).Serve(ln))
}
