"""portfed's Flower App: :mod:`.server_app` and :mod:`.client_app` wire portfed.flower to Flower."""
