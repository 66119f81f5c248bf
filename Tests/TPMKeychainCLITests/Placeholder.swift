// The CLI tests land here.
