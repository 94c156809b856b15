"""fabric_core.environments"""
