"""The release watcher: new releases on the package index become builds on the line of
releases."""
