// Package chart checks the archives that operators upload (Helm charts and
// EMCO profiles) before anything of them is stored.
//
// Both kinds of archive are gzip-compressed tar files. The package walks the tar
// itself, with archive/tar over compress/gzip, and refuses an archive as soon as
// one of its entries breaks a rule:
//
//   - the compressed archive is larger than Limits.MaxCompressed (errs.TooLarge);
//   - one file expands to more than Limits.MaxFileSize, or all the files (those of
//     the subchart archives under charts/ included) to more than
//     Limits.MaxUncompressed (errs.TooLarge). Bytes are counted while they are
//     read, through an io.LimitReader, never taken from the tar headers alone,
//     so a zip bomb stops after at most the limit;
//   - the archive has more than Limits.MaxFiles entries (errs.TooLarge);
//   - an entry has an absolute path, a ".." path element or a backslash, or is
//     anything but a regular file or a directory: symbolic and hard links,
//     devices and fifos are refused (errs.Malformed, naming the entry);
//   - the data is not gzip, or not a tar inside the gzip (errs.Malformed).
//
// A chart that passes is then loaded with the Helm v4 loader for v2 charts
// (loader.LoadFiles over the very files that were checked, so Helm sees nothing
// the checks did not) and its metadata is validated: Helm's validation errors are
// errs.Invalid with Helm's message, files Helm cannot parse are errs.Malformed.
//
// Usage:
//
//	c, err := chart.CheckChart(upload, chart.DefaultLimits())
//	if err != nil {
//		return err // errs.KindOf(err) is Malformed, TooLarge or Invalid
//	}
//	log.Printf("chart %s %s (%s)", c.Name(), c.Version(), c.Digest)
//
//	p, err := chart.CheckProfile(profileUpload, chart.DefaultLimits())
//	// p.Values() are the profile's override values, p.Files() its extra files.
package chart
