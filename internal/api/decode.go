package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"

	"github.com/atoll-edge/atoll/internal/errs"
)

// Body size limits.
const (
	maxJSONBody = 256 << 10
	// multipartOverhead is what a multipart body may carry besides its file.
	multipartOverhead = 64 << 10
)

// decodeJSON reads a JSON body into v. An absent Content-Type is taken as JSON
// (many scripts send none); any other type is refused with 415.
func decodeJSON(r *http.Request, v any) error {
	if err := requireType(r, "application/json"); err != nil {
		return err
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return bodyError(err)
	}
	return unmarshal(data, v, "request body")
}

// decodeOptionalJSON is decodeJSON for bodies that may be empty (lifecycle calls).
func decodeOptionalJSON(r *http.Request, v any) error {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return bodyError(err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := requireType(r, "application/json"); err != nil {
		return err
	}
	return unmarshal(data, v, "request body")
}

func unmarshal(data []byte, v any, what string) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return errs.New(errs.Malformed, "the %s is empty; send a JSON object", what)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syn):
			return errs.New(errs.Malformed, "the %s is not valid JSON: %s at byte %d", what, syn.Error(), syn.Offset)
		case errors.As(err, &typ):
			field := typ.Field
			if field == "" {
				field = "the top level"
			}
			return errs.New(errs.Malformed, "the %s has a %s where %s expects %s", what, typ.Value, field, typ.Type)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return errs.New(errs.Malformed, "the %s ends in the middle of a JSON value", what)
		}
		return errs.New(errs.Malformed, "the %s cannot be decoded as JSON: %s", what, err.Error())
	}
	if dec.More() {
		return errs.New(errs.Malformed, "the %s has data after its JSON object", what)
	}
	return nil
}

func requireType(r *http.Request, want string) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != want {
		return errs.New(errs.Unsupported, "content type %q is not accepted here; send %s", ct, want)
	}
	return nil
}

func bodyError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errs.New(errs.TooLarge, "the request body is larger than the limit of %d bytes for this route", mbe.Limit)
	}
	return errs.Wrap(errs.Malformed, err, "cannot read the request body")
}

// upload is a multipart request: the metadata JSON and the uploaded file, if any.
type upload struct {
	metadata []byte
	file     []byte // nil when no file part was sent
}

// readMultipart reads an EMCO multipart body: a "metadata" field holding the JSON
// object and a "file" part (its filename is whatever the client sent: emcoctl sends
// "filename"). The file may be at most maxFile bytes.
func readMultipart(r *http.Request, maxFile int64) (upload, error) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		return upload{}, errs.New(errs.Unsupported, "content type %q is not accepted here; send multipart/form-data with a \"metadata\" field and a \"file\" part", r.Header.Get("Content-Type"))
	}
	if params["boundary"] == "" {
		return upload{}, errs.New(errs.Malformed, "the multipart content type has no boundary")
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	var up upload
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return upload{}, bodyError(err)
			}
			return upload{}, errs.New(errs.Malformed, "the multipart body cannot be read: %s", err.Error())
		}
		switch part.FormName() {
		case "metadata":
			if up.metadata != nil {
				return upload{}, errs.New(errs.Malformed, "the multipart body has more than one \"metadata\" field")
			}
			up.metadata, err = io.ReadAll(io.LimitReader(part, maxJSONBody+1))
			if err == nil && len(up.metadata) > maxJSONBody {
				return upload{}, errs.New(errs.TooLarge, "the metadata field is larger than %d bytes", maxJSONBody)
			}
		case "file":
			if up.file != nil {
				return upload{}, errs.New(errs.Malformed, "the multipart body has more than one \"file\" part")
			}
			up.file, err = io.ReadAll(io.LimitReader(part, maxFile+1))
			if err == nil && int64(len(up.file)) > maxFile {
				return upload{}, errs.New(errs.TooLarge, "the uploaded file is larger than the limit of %s", sizeString(maxFile))
			}
			if up.file == nil {
				up.file = []byte{}
			}
		default:
			_, err = io.Copy(io.Discard, part)
		}
		if err != nil {
			return upload{}, bodyError(err)
		}
	}
	if up.metadata == nil {
		return upload{}, errs.New(errs.Malformed, "the multipart body has no \"metadata\" field")
	}
	return up, nil
}

func sizeString(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

func isMultipart(r *http.Request) bool {
	return strings.HasPrefix(strings.ToLower(r.Header.Get("Content-Type")), "multipart/")
}
