print("tpm-keychain")
